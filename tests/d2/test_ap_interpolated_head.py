"""MODEL.ALRP.CLS_LOSS "ap_interpolated": the official AP Loss in a detection head."""

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.utils.events import EventStorage

from alrp_d2.config import setup_cfg
from alrp_d2.engine.self_balance import LocalisationWeight
from alrp_d2.losses import ap_loss
from alrp_d2.modeling import DetectionRankingLoss

from ..test_ranking_losses import random_case
from .tiny_configs import CONFIG_DIR, tiny_batch, tiny_retinanet_cfg


def head_loss(cls_loss: str) -> DetectionRankingLoss:
    return DetectionRankingLoss(
        name=cls_loss, cls_loss=cls_loss, delta=1.0, loc_weight=LocalisationWeight(cls_loss, 1.0, self_balanced=False)
    )


@pytest.mark.parametrize("seed", range(4))
def test_head_loss_is_the_official_ap_loss(seed):
    logits, labels, _, delta = random_case(seed, torch.float32, "cpu")
    loss = head_loss("ap_interpolated")
    loss.delta = delta
    leaf = logits.clone().requires_grad_(True)
    with EventStorage():
        value = loss(leaf, labels, torch.rand(int((labels == 1).sum())))["loss_ap_interpolated_cls"]
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
        with EventStorage():
            value = head_loss(cls_loss)(leaf, labels, torch.rand(1))[f"loss_{cls_loss}_cls"]
        (grads[cls_loss],) = torch.autograd.grad(value, [leaf])
    assert grads["ap_interpolated"][0] < 0 < grads["ap_interpolated"][1]
    assert torch.all(grads["ap"] == 0)


def test_retinanet_training_step():
    torch.manual_seed(0)
    model = build_model(tiny_retinanet_cfg(CLS_LOSS="ap_interpolated", SB_ENABLED=False)).train()
    with EventStorage() as storage:
        losses = model(tiny_batch())
        sum(losses.values()).backward()
    assert set(losses) == {"loss_ap_interpolated_cls", "loss_ap_interpolated_loc"}
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    assert storage.latest()["ap_interpolated/grad_ratio"][0] == pytest.approx(1.0, rel=1e-4)
    assert model.head.cls_score.weight.grad.abs().sum() > 0


def test_ap_config_uses_the_official_loss():
    assert setup_cfg(f"{CONFIG_DIR}/ap_R50_500.yaml").MODEL.ALRP.CLS_LOSS == "ap_interpolated"
    with pytest.raises(ValueError, match="cls_loss"):
        head_loss("ap_int")
