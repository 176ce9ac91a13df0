"""MODEL.ALRP.CLS_LOSS "ap_interpolated": the official AP Loss in a detection head."""

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage

from alrp_d2.config import setup_cfg
from alrp_d2.losses import ap_loss
from alrp_d2.modeling import HeadRankingLoss, PositiveTargets

from ..test_ranking_losses import random_case
from .tiny_configs import CONFIG_DIR, ranking_statistics, tiny_batch, tiny_retinanet_cfg


def head_loss(cls_loss: str, delta: float = 1.0) -> HeadRankingLoss:
    return HeadRankingLoss(
        "head",
        cls_loss=cls_loss,
        delta=delta,
        loc_error_kind="giou",
        tau=0.5,
        loc_weight=1.0,
        self_balanced=False,
    )


def targets_of(labels: torch.Tensor) -> PositiveTargets:
    """(M, 1) logits: one class per row."""
    return PositiveTargets.of_objectness(labels)


@pytest.mark.parametrize("seed", range(4))
def test_head_loss_is_the_official_ap_loss(seed):
    logits, labels, _, delta = random_case(seed, torch.float32, "cpu")
    loss = head_loss("ap_interpolated", delta)
    leaf = logits.clone().requires_grad_(True)
    value = loss(leaf[:, None], targets_of(labels), torch.rand(int((labels == 1).sum())))["loss_head_cls"]
    (grad,) = torch.autograd.grad(value, [leaf])
    reference = logits.clone().requires_grad_(True)
    expected = ap_loss(reference, labels, delta=delta, eps=None, interpolated=True)
    (expected_grad,) = torch.autograd.grad(expected, [reference])
    assert value.item() == expected.item()
    assert torch.equal(grad, expected_grad)


def test_head_loss_has_no_false_positive_gate():
    """N_FP = 1e-7: the official loss moves the scores, the non-interpolated "ap" (App. E gate) does not."""
    logits = torch.tensor([0.0, -1.0 + 2e-7], dtype=torch.float64)
    labels = torch.tensor([1, 0])
    grads = {}
    for cls_loss in ("ap_interpolated", "ap"):
        leaf = logits.clone().requires_grad_(True)
        value = head_loss(cls_loss)(leaf[:, None], targets_of(labels), torch.rand(1))["loss_head_cls"]
        (grads[cls_loss],) = torch.autograd.grad(value, [leaf])
    assert grads["ap_interpolated"][0] < 0 < grads["ap_interpolated"][1]
    assert torch.all(grads["ap"] == 0)


def test_retinanet_training_step():
    torch.manual_seed(0)
    model = build_model(tiny_retinanet_cfg(CLS_LOSS="ap_interpolated", SB_ENABLED=False)).train()
    with EventStorage():
        losses = model(tiny_batch())
        sum(losses.values()).backward()
    assert set(losses) == {"loss_retinanet_cls", "loss_retinanet_loc"}
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    assert ranking_statistics(model)["retinanet"]["ratio"] == pytest.approx(1.0, rel=1e-4)
    assert model.head.cls_score.weight.grad.abs().sum() > 0


def test_ap_config_uses_the_official_loss():
    assert setup_cfg(f"{CONFIG_DIR}/ap_R50_500.yaml").MODEL.ALRP.CLS_LOSS == "ap_interpolated"
    with pytest.raises(ValueError, match="cls_loss"):
        head_loss("ap_int")
