"""MODEL.ALRP.CRITERION "InterpolatedAPCriterion": the official AP Loss in a detection head."""

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage

from alrp_d2.config import setup_cfg
from alrp_d2.criteria import APCriterion, CriterionSet, InterpolatedAPCriterion, PositiveTargets
from alrp_d2.losses import LabelledSet, ap_loss

from ..ranking_cases import only_set, random_case
from .tiny_configs import CONFIG_DIR, ranking_statistics, tiny_batch, tiny_retinanet_cfg

CRITERIA = {"interpolated": (InterpolatedAPCriterion, None), "plain": (APCriterion, 1e-5)}


def ap_criterion(kind: str, delta: float = 1.0) -> APCriterion:
    criterion, eps = CRITERIA[kind]
    return criterion(delta=delta, loc_loss="giou", loc_error_kind="giou", tau=0.5, eps=eps)


def targets_of(labels: torch.Tensor) -> PositiveTargets:
    """(M, 1) logits: one class per row."""
    return PositiveTargets.of_objectness(labels)


@pytest.mark.parametrize("seed", range(4))
def test_head_loss_is_the_official_ap_loss(seed):
    logits, labels, _, delta = random_case(seed, torch.float32, "cpu")
    criterion = ap_criterion("interpolated", delta)
    leaf = logits.clone().requires_grad_(True)
    (output,) = criterion([CriterionSet(leaf[:, None], targets_of(labels), torch.rand(int((labels == 1).sum())))], None)
    value = output.loss_cls
    (grad,) = torch.autograd.grad(value, [leaf])
    reference = logits.clone().requires_grad_(True)
    expected = only_set(ap_loss([LabelledSet(reference, labels)], delta=delta, eps=None, interpolated=True)).loss
    (expected_grad,) = torch.autograd.grad(expected, [reference])
    assert value.item() == expected.item()
    assert torch.equal(grad, expected_grad)


def test_head_loss_has_no_false_positive_gate():
    """N_FP = 1e-7: the official loss moves the scores, the non-interpolated "ap" (App. E gate) does not."""
    logits = torch.tensor([0.0, -1.0 + 2e-7], dtype=torch.float64)
    labels = torch.tensor([1, 0])
    grads = {}
    for kind in CRITERIA:
        leaf = logits.clone().requires_grad_(True)
        (output,) = ap_criterion(kind)([CriterionSet(leaf[:, None], targets_of(labels), torch.rand(1))], None)
        value = output.loss_cls
        (grads[kind],) = torch.autograd.grad(value, [leaf])
    assert grads["interpolated"][0] < 0 < grads["interpolated"][1]
    assert torch.all(grads["plain"] == 0)


def test_retinanet_training_step():
    torch.manual_seed(0)
    model = build_model(tiny_retinanet_cfg(CRITERION="InterpolatedAPCriterion", SB_ENABLED=False)).train()
    with EventStorage():
        losses = model(tiny_batch())
        sum(losses.values()).backward()
    assert set(losses) == {"loss_retinanet_cls", "loss_retinanet_loc"}
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    assert ranking_statistics(model)["retinanet"]["ratio"] == pytest.approx(1.0, rel=1e-4)
    assert model.head.cls_score.weight.grad.abs().sum() > 0


def test_ap_config_uses_the_official_loss():
    assert setup_cfg(f"{CONFIG_DIR}/ap_R50_500.yaml").MODEL.ALRP.CRITERION == "InterpolatedAPCriterion"
    with pytest.raises(ValueError, match="loc_loss"):
        APCriterion(delta=1.0, loc_loss="l2", loc_error_kind="giou", tau=0.5)
