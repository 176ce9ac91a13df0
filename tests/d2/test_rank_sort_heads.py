"""Rank & Sort Loss in the detection heads (RS R-CNN's RPN and box head, RS Mask R-CNN's mask head, RS-ATSS)
against a transcription of the official heads (kemaloksuz/RankSortLoss: ``RankBasedRPNHead.loss``,
``RankBasedShared2FCBBoxHead.loss``, ``RankBasedATSSHead.loss``, ``RankBasedFCNMaskHead.loss``): IoU targets of the
decoded boxes (a positive of IoU 0 ranks as a negative), the box loss weighted by the best class score, the
balancing by the loss values of the step; empty batches; the mask head's resampling; config checks."""

from __future__ import annotations

import random
from typing import Dict

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.structures import BitMasks, Boxes, Instances
from detectron2.utils.events import EventStorage
from torch import Tensor

from alrp_d2.config import setup_cfg
from alrp_d2.criteria import CriterionSet, RankSortCriterion, RankSortTargets, RowLabels
from alrp_d2.modeling import (
    AlrpGeneralizedRCNN,
    HeadRankingLoss,
    LastLevelP6P7WithoutReLU,
    OctaveAnchorGenerator,
    RankSortATSS,
    RankSortMaskHead,
    XavierUniformFCHead,
)
from alrp_d2.modeling.rank_sort_atss import LevelScaledRetinaNetHead
from alrp_d2.modeling.rank_sort_mask_head import dice_losses

from ..loop_reference import rank_sort_loss_loop
from .given_boxes import GivenBoxes
from .official_fixtures import assert_fpn_xavier_uniform
from .tiny_configs import CONFIG_DIR, ranking_statistics, tiny_batch, tiny_rank_sort_cfg, with_masks

MASK_CONFIG = "quickstart/rs_mask_rcnn_shapes.yaml"
LOSS_NAMES = {
    "rs_faster_rcnn_R50_FPN_1x.yaml": {"loss_rpn_cls", "loss_rpn_loc", "loss_box_cls", "loss_box_loc"},
    MASK_CONFIG: {"loss_rpn_cls", "loss_rpn_loc", "loss_box_cls", "loss_box_loc", "loss_mask"},
    "rs_atss_R50_FPN_1x.yaml": {"loss_atss_cls", "loss_atss_loc"},
}


# ---------------------------------------------------------------------------------------------------------------
# A transcription of the official heads' loss (mmdetection's bbox_overlaps with eps 1e-6, GIoULoss, RankSort).


def official_overlaps(pred: Tensor, target: Tensor, mode: str, eps: float = 1e-6) -> Tensor:
    """mmdetection's ``bbox_overlaps(pred, target, mode, is_aligned=True, eps)``."""
    area1 = (pred[:, 2] - pred[:, 0]) * (pred[:, 3] - pred[:, 1])
    area2 = (target[:, 2] - target[:, 0]) * (target[:, 3] - target[:, 1])
    wh = (torch.min(pred[:, 2:], target[:, 2:]) - torch.max(pred[:, :2], target[:, :2])).clamp(min=0)
    overlap = wh[:, 0] * wh[:, 1]
    union = (area1 + area2 - overlap).clamp(min=eps)
    ious = overlap / union
    if mode == "iou":
        return ious
    enclosed = (torch.max(pred[:, 2:], target[:, 2:]) - torch.min(pred[:, :2], target[:, :2])).clamp(min=0)
    enclose_area = (enclosed[:, 0] * enclosed[:, 1]).clamp(min=eps)
    return ious - (enclose_area - union) / enclose_area


def official_head(logits: Tensor, labels: Tensor, pred_boxes: Tensor, gt_boxes: Tensor, delta: float = 0.5) -> Dict:
    """The official RS head's loss: ``labels`` a class in [0, K), K background, -1 ignored (label weight 0);
    ``pred_boxes`` (rows, 4) each row's decoded box (its GT class's for the box head), differentiable."""
    rows, num_classes = logits.shape
    positive = (labels >= 0) & (labels < num_classes)
    flat_labels = torch.zeros(rows, num_classes, dtype=torch.float64)
    flat_labels[positive.nonzero().squeeze(1), labels[positive]] = 1.0
    flat_labels[labels == -1] = -1.0
    flat_labels[flat_labels == 1] = official_overlaps(
        pred_boxes[positive].detach().double(), gt_boxes[positive].double(), "iou"
    )
    ranking, sorting, logit_grad = rank_sort_loss_loop(
        logits.detach().double().reshape(-1), flat_labels.reshape(-1), delta
    )
    box_losses = 1.0 - official_overlaps(pred_boxes[positive], gt_boxes[positive], "giou")
    weights = logits.detach().sigmoid().max(dim=1)[0][positive]
    avg_factor = weights.sum() if weights.sum() >= 1e-10 else 1.0
    loss_box = (weights * box_losses).sum() / avg_factor
    balance = (ranking + sorting) / loss_box.item()
    return {
        "rank": ranking.item(),
        "sort": sorting.item(),
        "logit_grad": logit_grad.reshape(rows, num_classes),
        "loss_box": loss_box,
        "balance": balance.item(),
    }


def rank_sort_head(name: str = "head", delta: float = 0.5, tasks=()) -> HeadRankingLoss:
    criterion = RankSortCriterion(delta=delta, loc_error_kind="giou")
    return HeadRankingLoss(name, criterion=criterion, loc_weight=1.0, self_balanced=False, balanced_tasks=tasks)


def random_boxes(count: int, generator: torch.Generator) -> Tensor:
    xy = torch.rand(count, 2, generator=generator, dtype=torch.float64) * 80
    wh = torch.rand(count, 2, generator=generator, dtype=torch.float64) * 40 + 8
    return torch.cat([xy, xy + wh], 1)


def jittered(boxes: Tensor, sigma: float, generator: torch.Generator) -> Tensor:
    """``boxes`` with every coordinate moved by N(0, sigma^2), still valid boxes (x1 <= x2, y1 <= y2)."""
    moved = boxes + torch.randn(boxes.shape, generator=generator, dtype=boxes.dtype) * sigma
    return torch.cat([torch.min(moved[:, :2], moved[:, 2:]), torch.max(moved[:, :2], moved[:, 2:])], 1)


def assert_matches_official(
    out: Dict[str, Tensor], head: HeadRankingLoss, expected: Dict, logits: Tensor, pred: Tensor
):
    """Values, the statistics and the gradients of ``loss_head_cls`` (logits) and ``loss_head_loc`` (boxes)."""
    statistics = head.take_statistics()
    components = statistics.values
    assert (components["logit_min"], components["logit_max"]) == (logits.min(), logits.max())  # CollapseCheckHook's
    value = expected["rank"] + expected["sort"]
    assert components["rank"].item() == pytest.approx(expected["rank"], rel=1e-9, abs=1e-12)
    assert components["sort"].item() == pytest.approx(expected["sort"], rel=1e-9, abs=1e-12)
    assert out["loss_head_cls"].item() == pytest.approx(value, rel=1e-9)
    assert components["loc"].item() == pytest.approx(expected["loss_box"].item(), rel=1e-5)
    assert components["weight"].item() == pytest.approx(expected["balance"], rel=1e-5)
    # The balanced box loss equals the classification value; its gradient is lambda times L_box's.
    assert out["loss_head_loc"].item() == pytest.approx(value, rel=1e-5)
    (logit_grad,) = torch.autograd.grad(out["loss_head_cls"], [logits], retain_graph=True)
    torch.testing.assert_close(logit_grad, expected["logit_grad"], rtol=1e-6, atol=1e-9)
    (box_grad,) = torch.autograd.grad(out["loss_head_loc"], [pred])
    (official_box_grad,) = torch.autograd.grad(expected["balance"] * expected["loss_box"], [pred])
    torch.testing.assert_close(box_grad, official_box_grad, rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("objectness", [False, True], ids=["classes", "objectness"])
@pytest.mark.parametrize("seed", range(3))
def test_head_loss_is_the_official_heads(seed, objectness):
    """Random rows with ignored ones, a positive whose box misses its ground truth (IoU 0: a negative of the
    ranking, still in the box loss) and tied scores; float64."""
    gen = torch.Generator().manual_seed(seed)
    rows, num_classes = 60, (1 if objectness else 3)
    logits = (torch.randn(rows, num_classes, generator=gen, dtype=torch.float64) * 1.5).round(decimals=1)
    logits.requires_grad_(True)
    gt_boxes = random_boxes(rows, gen)
    pred = jittered(gt_boxes, 2.0, gen).requires_grad_(True)
    labels = torch.full((rows,), num_classes)
    labels[:12] = torch.randint(0, num_classes, (12,), generator=gen)
    labels[12:18] = -1
    missed = 3
    with torch.no_grad():
        pred[missed] = gt_boxes[missed] + torch.tensor([200.0, 200.0, 220.0, 220.0], dtype=torch.float64)
    overlaps = official_overlaps(pred.detach(), gt_boxes, "iou")
    assert overlaps[missed] == 0 and int((overlaps[:12] > 0).sum()) == 11

    head = rank_sort_head()
    if objectness:
        rows = RowLabels(torch.where(labels == num_classes, 0, torch.where(labels < 0, -1, 1)), None)
    else:
        rows = RowLabels(labels, num_classes)
    boxes = GivenBoxes(pred, gt_boxes)
    targets = head.criterion.targets(rows, boxes)
    assert isinstance(targets, RankSortTargets)
    torch.testing.assert_close(boxes.row_overlaps(), overlaps)
    assert len(targets.box.row) == 12 and len(targets.ranked.row) == 11 and missed not in targets.ranked.row
    out = head(logits, rows, boxes).losses
    expected = official_head(logits, labels, pred, gt_boxes)
    assert_matches_official(out, head, expected, logits, pred)


def test_positives_of_iou_zero_only_leave_no_ranking_and_no_box_gradient():
    """Every positive misses its box: the official RankSort would fail on an empty minimum; here the ranking
    and sorting losses are 0, so the balancing weight and the box loss are 0 (finite, connected)."""
    logits = torch.randn(10, 2, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1] + [2] * 8)
    criterion = RankSortCriterion(delta=0.5, loc_error_kind="giou")
    targets = RankSortTargets.of_labels(labels, 2, torch.zeros(10, dtype=torch.float64))
    assert len(targets.box.row) == 2 and len(targets.ranked.row) == 0
    box_losses = torch.tensor([1.5, 1.2], dtype=torch.float64, requires_grad=True)
    (out,) = criterion([CriterionSet(logits, targets, box_losses)], None)
    loss_loc = out.loc_factor * out.loss_loc
    assert out.loss_cls.item() == 0 and loss_loc.item() == 0 and out.loss_loc.item() > 0
    (out.loss_cls + loss_loc).backward()
    assert torch.all(box_losses.grad == 0) and torch.all(logits.grad == 0)


def test_rank_sort_targets_need_one_host_synchronisation():
    from ..host_syncs import HostSyncCounter

    labels = torch.tensor([0, 3, 1, -1, 2, 3])
    with HostSyncCounter() as syncs:
        targets = RankSortTargets.of_labels(labels, 3, torch.tensor([0.5, 0.9, 0.0, 0.7, 0.25, 0.2]))
    assert syncs.total("alrp_d2") == 1
    assert targets.box.row.tolist() == [0, 2, 4] and targets.box.label.tolist() == [0, 1, 2]
    assert targets.ranked.row.tolist() == [0, 4] and targets.overlaps.tolist() == [0.5, 0.25]
    assert targets.box.valid.squeeze(1).tolist() == [True, True, True, False, True, True]


# ---------------------------------------------------------------------------------------------------------------
# The heads of the detectors, against the transcription.


def rank_sort_model(config: str, **alrp):
    torch.manual_seed(0)
    return build_model(tiny_rank_sort_cfg(config, **alrp)).train()


def test_box_head_is_the_official_box_head():
    """RS R-CNN's box head on given predictions: the boxes decoded from each positive's GT-class deltas."""
    predictor = rank_sort_model("rs_faster_rcnn_R50_FPN_1x.yaml").roi_heads.box_predictor
    gen = torch.Generator().manual_seed(3)
    proposals = []
    for count in (30, 0, 20):
        image = Instances((96, 128))
        image.proposal_boxes = Boxes(random_boxes(count, gen).float())
        image.gt_boxes = Boxes(jittered(image.proposal_boxes.tensor, 5.0, gen))
        image.gt_classes = torch.where(
            torch.rand(count, generator=gen) < 0.4, torch.randint(0, 3, (count,), generator=gen), 3
        )
        proposals.append(image)
    scores = torch.randn(50, 3, generator=gen).requires_grad_(True)
    deltas = (torch.randn(50, 12, generator=gen) * 0.3).requires_grad_(True)
    fields = [sorted(p.get_fields()) for p in proposals]
    with EventStorage():
        out = predictor.losses((scores, deltas), proposals)
    assert [sorted(p.get_fields()) for p in proposals] == fields  # the loss writes nothing on its inputs
    labels = torch.cat([p.gt_classes for p in proposals])
    boxes = torch.cat([p.proposal_boxes.tensor for p in proposals])
    class_deltas = deltas.reshape(50, 3, 4)[torch.arange(50), labels.clamp(max=2)]
    pred = predictor.box2box_transform.apply_deltas(class_deltas, boxes)
    expected = official_head(scores, labels, pred, torch.cat([p.gt_boxes.tensor for p in proposals]))
    statistics = predictor.ranking_loss.take_statistics().values
    assert statistics["rank"].item() == pytest.approx(expected["rank"], rel=1e-5)
    assert statistics["sort"].item() == pytest.approx(expected["sort"], rel=1e-5, abs=1e-7)
    assert out["loss_box_loc"].item() == pytest.approx(expected["rank"] + expected["sort"], rel=1e-5)
    (logit_grad,) = torch.autograd.grad(out["loss_box_cls"], [scores])
    torch.testing.assert_close(logit_grad.double(), expected["logit_grad"], rtol=1e-4, atol=1e-7)
    (grad,) = torch.autograd.grad(out["loss_box_loc"], [deltas])
    (official_grad,) = torch.autograd.grad(expected["balance"] * expected["loss_box"], [deltas])
    torch.testing.assert_close(grad, official_grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("head", ["rpn", "atss"])
def test_dense_heads_are_the_official_dense_heads(head):
    """RS R-CNN's RPN (objectness, head weight 0.2) and RS-ATSS (classes) on given predictions."""
    if head == "rpn":
        model = rank_sort_model("rs_faster_rcnn_R50_FPN_1x.yaml")
        module, num_classes, weight = model.proposal_generator, 1, 0.2
    else:
        model = rank_sort_model("rs_atss_R50_FPN_1x.yaml")
        module, num_classes, weight = model, 3, 1.0
    gen = torch.Generator().manual_seed(5)
    level_sizes = (40, 12)
    anchors = [Boxes(random_boxes(size, gen).float()) for size in level_sizes]
    images = 2
    rows = images * sum(level_sizes)
    logits = [torch.randn(images, size, generator=gen).requires_grad_(True) for size in level_sizes]
    if num_classes > 1:
        logits = [torch.randn(images, size, num_classes, generator=gen).requires_grad_(True) for size in level_sizes]
    deltas = [(torch.randn(images, size, 4, generator=gen) * 0.3).requires_grad_(True) for size in level_sizes]
    all_anchors = Boxes.cat(anchors).tensor
    gt_boxes = [jittered(all_anchors, 4.0, gen) for _ in range(images)]
    drawn = torch.rand(images, len(all_anchors), generator=gen)
    if head == "rpn":
        gt_labels = list(torch.where(drawn < 0.2, 1, torch.where(drawn < 0.3, -1, 0)).unbind(0))
        official_labels = torch.cat(gt_labels).where(torch.cat(gt_labels) != 1, 0).where(torch.cat(gt_labels) != 0, 1)
    else:
        gt_labels = list(torch.where(drawn < 0.25, torch.randint(0, 3, drawn.shape, generator=gen), 3).unbind(0))
        official_labels = torch.cat(gt_labels)
    with EventStorage():
        out = module.losses(anchors, logits, gt_labels, deltas, gt_boxes)
    flat_logits = torch.cat(logits, dim=1).reshape(rows, num_classes)
    flat_deltas = torch.cat(deltas, dim=1).reshape(rows, 4)
    pred = module.box2box_transform.apply_deltas(flat_deltas, all_anchors.repeat(images, 1))
    expected = official_head(flat_logits, official_labels, pred, torch.cat(gt_boxes))
    name = "rpn" if head == "rpn" else "atss"
    components = module.ranking_loss.take_statistics().values
    assert components["rank"].item() == pytest.approx(expected["rank"], rel=1e-5)
    assert components["sort"].item() == pytest.approx(expected["sort"], rel=1e-5, abs=1e-7)
    assert out[f"loss_{name}_cls"].item() == pytest.approx(weight * (expected["rank"] + expected["sort"]), rel=1e-5)
    assert out[f"loss_{name}_loc"].item() == pytest.approx(weight * (expected["rank"] + expected["sort"]), rel=1e-5)
    grads = torch.autograd.grad(out[f"loss_{name}_loc"], deltas)
    official_grads = torch.autograd.grad(weight * expected["balance"] * expected["loss_box"], deltas)
    torch.testing.assert_close(grads, official_grads, rtol=1e-4, atol=1e-7)
    logit_grads = torch.autograd.grad(out[f"loss_{name}_cls"], logits)
    logit_grad = torch.cat(logit_grads, dim=1).reshape(rows, num_classes)
    torch.testing.assert_close(logit_grad.double(), weight * expected["logit_grad"], rtol=1e-4, atol=1e-7)


def test_rs_atss_has_the_atss_head():
    model = rank_sort_model("rs_atss_R50_FPN_1x.yaml")
    assert isinstance(model, RankSortATSS) and isinstance(model.head, LevelScaledRetinaNetHead)
    assert model.head.scales.tolist() == [1.0] * 5
    cfg = setup_cfg(f"{CONFIG_DIR}/rs_atss_R50_FPN_1x.yaml")
    assert cfg.MODEL.RETINANET.NORM == "GN" and cfg.MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS == [[1.0]]
    with EventStorage():
        losses = model(tiny_batch())
    sum(losses.values()).backward()
    assert model.head.scales.grad.abs().sum() > 0


def official_cell_anchor_widths(stride: int, octave_base_scale: float, scales_per_octave: int, ratios) -> Tensor:
    """mmdetection's ``AnchorGenerator.gen_single_level_base_anchors`` widths in float32 (centre offset 0)."""
    scales = octave_base_scale * 2 ** (torch.arange(scales_per_octave, dtype=torch.float32) / scales_per_octave)
    w_ratios = 1 / torch.sqrt(torch.tensor(ratios, dtype=torch.float32))
    return (stride * w_ratios[:, None] * scales[None, :]).reshape(-1)


@pytest.mark.parametrize(
    "config", ["rs_faster_rcnn_R50_FPN_1x.yaml", "rs_mask_rcnn_R50_FPN_1x.yaml", "rs_atss_R50_FPN_1x.yaml"]
)
def test_rank_sort_configs_build_the_official_network(config):
    """mmdetection 2.8's network where detectron2 differs (as the official aLRP configs): float32 octave anchors,
    xavier_uniform FPN, empty detections kept, the mmcv test resize, mmdetection's training filter; R-CNN: the
    RPN's MaxIoUAssigner ground truth, proposals of any size, the xavier_uniform box head; RS-ATSS: P7 without ReLU."""
    cfg = setup_cfg(f"{CONFIG_DIR}/{config}", ["MODEL.WEIGHTS", "", "MODEL.DEVICE", "cpu"])
    model = build_model(cfg)
    assert model.keep_empty_detections
    assert cfg.INPUT.TEST_RESIZE == "mmcv" and cfg.DATALOADER.TRAIN_FILTER == "mmdet"
    assert assert_fpn_xavier_uniform(model.backbone) > 0
    if config == "rs_atss_R50_FPN_1x.yaml":
        assert isinstance(model.backbone.top_block, LastLevelP6P7WithoutReLU)
        generator, expected = model.anchor_generator, (4.0, 3, [1.0])
    else:
        assert isinstance(model, AlrpGeneralizedRCNN) and isinstance(model.roi_heads.box_head, XavierUniformFCHead)
        rpn = model.proposal_generator
        assert rpn.anchor_matcher.low_quality_gt == "best_anchor" and rpn.min_box_size == -1
        generator, expected = rpn.anchor_generator, (8.0, 1, [0.5, 1.0, 2.0])
    assert isinstance(generator, OctaveAnchorGenerator)
    for stride, cell in zip(generator.strides, generator.cell_anchors):
        widths = cell[:, 2] - cell[:, 0]
        torch.testing.assert_close(widths, official_cell_anchor_widths(stride, *expected), rtol=0, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# The mask head.


def official_dice_losses(probs: Tensor, targets: Tensor) -> Tensor:
    """The official ``RankBasedFCNMaskHead.dice_coefficient``: 1 - dice."""
    probs, targets = probs.reshape(len(probs), -1), targets.reshape(len(targets), -1)
    dice = 2 * (probs * targets).sum(dim=1) / ((probs**2.0).sum(dim=1) + (targets**2.0).sum(dim=1) + 1e-5)
    return 1 - dice


def test_mask_loss_is_the_score_weighted_dice_loss():
    head = rank_sort_model(MASK_CONFIG).roi_heads.mask_head
    assert isinstance(head, RankSortMaskHead)
    gen = torch.Generator().manual_seed(2)
    images = []
    for count in (3, 0, 2):
        image = Instances((40, 50))
        image.proposal_boxes = Boxes(torch.tensor([[2.0, 3.0, 30.0, 35.0]]).repeat(count, 1))
        image.gt_classes = torch.randint(0, 5, (count,), generator=gen)
        image.gt_masks = BitMasks(torch.rand(count, 40, 50, generator=gen) > 0.5)
        images.append(image)
    weights = torch.rand(5, generator=gen)
    logits = torch.randn(5, 5, 28, 28, generator=gen)
    loss = head.weighted_dice_loss(logits, images, weights)
    present = [image for image in images if len(image)]
    targets = torch.cat([i.gt_masks.crop_and_resize(i.proposal_boxes.tensor, 28) for i in present]).float()
    classes = torch.cat([i.gt_classes for i in present])
    losses = official_dice_losses(logits[torch.arange(5), classes].sigmoid(), targets)
    torch.testing.assert_close(dice_losses(logits[torch.arange(5), classes].sigmoid(), targets), losses)
    assert loss.item() == pytest.approx(((weights * losses).sum() / weights.sum()).item(), rel=1e-6)
    with pytest.raises(RuntimeError, match="AlrpROIHeads"):
        head(torch.randn(5, 16, 14, 14), images)


def test_mask_loss_is_balanced_by_the_box_heads_rank_sort_loss():
    model = rank_sort_model(MASK_CONFIG)
    with EventStorage():
        losses = model(with_masks(tiny_batch()))
    assert set(losses) == LOSS_NAMES[MASK_CONFIG]
    box = ranking_statistics(model)["box"]
    assert box["mask"] > 0 and box["mask_weight"] == pytest.approx(box["cls"] / box["mask"], rel=1e-5)
    assert losses["loss_mask"].item() == pytest.approx(losses["loss_box_cls"].item(), rel=1e-5)
    sum(losses.values()).backward()
    assert model.roi_heads.mask_head.predictor.weight.grad.abs().sum() > 0


def test_balancing_a_task_returns_the_loss_and_the_completed_record():
    """The head's record of the step is its statistics once every balanced task is in it, never before; the balance
    returns the weighted loss and the record, leaving the step it was given as it was."""
    gen = torch.Generator().manual_seed(0)
    gt_boxes = random_boxes(8, gen)
    boxes = GivenBoxes(jittered(gt_boxes, 2.0, gen), gt_boxes)
    head = rank_sort_head("box", tasks=("mask",))
    step = head(torch.randn(8, 2, generator=gen), RowLabels(torch.tensor([0, 1, 0] + [2] * 5), 2), boxes)
    assert "mask" not in step.statistics.values and head.take_statistics() is None
    mask_loss = torch.tensor(0.25, requires_grad=True)
    loss, balanced = head.balance_task("mask", mask_loss, step)
    weight = balanced.statistics.values["mask_weight"]
    assert loss.item() == pytest.approx((weight * mask_loss).item()) and loss.requires_grad
    assert balanced.statistics.values["mask"] == 0.25 and "mask" not in step.statistics.values
    assert head.take_statistics() == balanced.statistics and head.take_statistics() is None
    with pytest.raises(ValueError, match="balances the tasks \\('mask',\\), not 'keypoint'"):
        head.balance_task("keypoint", mask_loss, step)


def test_the_box_head_balances_the_task_the_mask_head_declares():
    """Built from a config, the box loss balances what the mask head declares; given another mask head's box loss,
    the ROI heads name the mismatch."""
    model = rank_sort_model(MASK_CONFIG)
    assert model.roi_heads.box_predictor.ranking_loss.balanced_tasks == (RankSortMaskHead.box_balanced_task,)
    heads = rank_sort_model("rs_faster_rcnn_R50_FPN_1x.yaml").roi_heads
    arguments = dict(
        box_in_features=heads.box_in_features,
        box_pooler=heads.box_pooler,
        box_head=heads.box_head,
        box_predictor=heads.box_predictor,
        mask_in_features=model.roi_heads.mask_in_features,
        mask_pooler=model.roi_heads.mask_pooler,
        mask_head=model.roi_heads.mask_head,
        num_classes=heads.num_classes,
        batch_size_per_image=512,
        positive_fraction=0.25,
        proposal_matcher=heads.proposal_matcher,
    )
    with pytest.raises(ValueError, match=r"balanced_tasks=\(\)\): must be \('mask',\), .* RankSortMaskHead"):
        type(heads)(**arguments)


def test_at_most_max_positives_train_the_mask_head():
    head = rank_sort_model(MASK_CONFIG, MASK_MAX_POSITIVES=4).roi_heads.mask_head
    images = []
    start = 0
    for count in (5, 0, 7):
        image = Instances((10, 10))
        image.proposal_boxes = Boxes(torch.zeros(count, 4))
        image.gt_classes = torch.arange(start, start + count)
        images.append(image)
        start += count
    weights = torch.arange(12, dtype=torch.float32) / 10
    random.seed(0)
    first, first_weights = head.subsample(images, weights)
    random.seed(0)
    again, again_weights = head.subsample(images, weights)
    assert sum(len(image) for image in first) == 4
    assert [i.gt_classes.tolist() for i in first] == [i.gt_classes.tolist() for i in again]
    assert torch.equal(first_weights, again_weights)
    kept = torch.cat([image.gt_classes for image in first])
    assert torch.equal(first_weights, weights[kept])  # each kept positive keeps its own weight
    ranges = [(0, 5), (5, 5), (5, 12)]
    for image, (low, high) in zip(first, ranges):
        assert all(low <= value < high for value in image.gt_classes.tolist())
    head.max_positives = 12
    assert head.subsample(images, weights) == (images, weights)


# ---------------------------------------------------------------------------------------------------------------
# Empty batches, steps, configs.


@pytest.mark.parametrize("config", list(LOSS_NAMES))
def test_a_batch_without_objects_gives_finite_zero_losses(config):
    model = rank_sort_model(config)
    with EventStorage():
        losses = model(with_masks(tiny_batch(with_objects=False)))
    assert set(losses) == LOSS_NAMES[config]
    assert all(torch.isfinite(value) and value.item() == 0 for value in losses.values()), losses
    sum(losses.values()).backward()


def test_no_proposals_give_finite_zero_losses():
    predictor = rank_sort_model("rs_faster_rcnn_R50_FPN_1x.yaml").roi_heads.box_predictor
    image = Instances((96, 128))
    image.proposal_boxes = Boxes(torch.zeros(0, 4))
    image.gt_classes = torch.zeros(0, dtype=torch.long)
    scores = torch.zeros(0, 3, requires_grad=True)
    deltas = torch.zeros(0, 12, requires_grad=True)
    with EventStorage():
        losses = predictor.losses((scores, deltas), [image])
    assert all(torch.isfinite(value) and value.item() == 0 for value in losses.values())
    sum(losses.values()).backward()


@pytest.mark.parametrize("config", list(LOSS_NAMES))
def test_training_step_logs_the_unweighted_components(config):
    model = rank_sort_model(config)
    with EventStorage():
        losses = model(with_masks(tiny_batch()))
    sum(losses.values()).backward()
    assert all(torch.isfinite(value) and value > 0 for value in losses.values())
    for name, logged in ranking_statistics(model).items():
        weight = 0.2 if name == "rpn" else 1.0
        assert logged["cls"] == pytest.approx(logged["rank"] + logged["sort"], rel=1e-6)
        assert losses[f"loss_{name}_cls"].item() == pytest.approx(weight * logged["cls"], rel=1e-6)
        assert losses[f"loss_{name}_loc"].item() == pytest.approx(weight * logged["weight"] * logged["loc"], rel=1e-5)


def test_rank_sort_config_checks():
    """Checked when the model is built, by the code that reads the keys."""
    with pytest.raises(ValueError, match="MODEL.ALRP.SB_ENABLED"):
        build_model(tiny_rank_sort_cfg(SB_ENABLED=True))
    assert build_model(tiny_rank_sort_cfg(DELTA=0.0)).roi_heads.box_predictor.ranking_loss.criterion.delta == 0.0
    with pytest.raises(ValueError, match="MODEL.ALRP.DELTA"):
        build_model(tiny_rank_sort_cfg(DELTA=0.0, CRITERION="AlrpCriterion", SB_ENABLED=True))
    with pytest.raises(ValueError, match="MODEL.ALRP.MASK_MAX_POSITIVES"):
        build_model(tiny_rank_sort_cfg(MASK_CONFIG, MASK_MAX_POSITIVES=0))
    with pytest.raises(ValueError, match=r"CRITERION='AlrpCriterion': .*balanced_tasks=\('mask',\) of .*\['box'\]"):
        build_model(tiny_rank_sort_cfg(MASK_CONFIG, CRITERION="AlrpCriterion", SB_ENABLED=True))


def test_every_criterion_trains_every_head():
    """No head is tied to a criterion: Rank & Sort Loss trains FoveaBox, which has no official RS version."""
    cfg = tiny_rank_sort_cfg("foveabox_alrp_R50_500.yaml", CRITERION="RankSortCriterion", SB_ENABLED=False)
    cfg.MODEL.FOVEABOX.NUM_CLASSES = 3
    model = build_model(cfg).train()
    with EventStorage():
        losses = model(tiny_batch())
    assert set(losses) == {"loss_fovea_cls", "loss_fovea_loc"} and all(torch.isfinite(v) for v in losses.values())


# ---------------------------------------------------------------------------------------------------------------
# The recipe of the official configs (configs/ranksort_loss/ranksort_{faster_rcnn,mask_rcnn,atss}_r50_fpn_1x_coco.py
# of kemaloksuz/RankSortLoss and their _base_ files: 4 GPUs x 4 images, 12 epochs, steps at epochs 8 and 11).

EPOCH = 7330  # ceil(117,266 COCO train2017 images with annotations / 16)
COMMON_RECIPE = {
    "SOLVER.IMS_PER_BATCH": 16,
    "SOLVER.MOMENTUM": 0.9,
    "SOLVER.WEIGHT_DECAY": 0.0001,
    "SOLVER.WEIGHT_DECAY_NORM": 0.0001,
    "SOLVER.MAX_ITER": 12 * EPOCH,
    "SOLVER.STEPS": (8 * EPOCH, 11 * EPOCH),
    "SOLVER.WARMUP_METHOD": "linear",
    "SOLVER.WARMUP_FACTOR": 0.001,
    "SOLVER.WARMUP_ITERS": 500,
    "INPUT.MIN_SIZE_TRAIN": (800,),
    "INPUT.MAX_SIZE_TRAIN": 1333,
    "INPUT.MIN_SIZE_TEST": 800,
    "INPUT.MAX_SIZE_TEST": 1333,
    "INPUT.FORMAT": "RGB",
    "MODEL.WEIGHTS": "detectron2://ImageNetPretrained/torchvision/R-50.pkl",
    "MODEL.RESNETS.NORM": "FrozenStatsBN",
    "MODEL.BACKBONE.FREEZE_AT": 2,
    "MODEL.ALRP.CRITERION": "RankSortCriterion",
    "MODEL.ALRP.DELTA": 0.5,
    "MODEL.ALRP.LOC_ERROR": "giou",
    "MODEL.ALRP.SB_ENABLED": False,
    "MODEL.ALRP.LOC_WEIGHT": 1.0,
    "TEST.DETECTIONS_PER_IMAGE": 100,
}
RCNN_RECIPE = {
    **COMMON_RECIPE,
    "SOLVER.BASE_LR": 0.012,
    "MODEL.ALRP.RPN_DELTA": 0.5,
    "MODEL.ALRP.RPN_WEIGHT": 0.2,
    "MODEL.ALRP.RPN_LOW_QUALITY_MIN_IOU": 0.3,
    "MODEL.RPN.IOU_THRESHOLDS": [0.3, 0.7],
    "MODEL.RPN.BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0),
    "MODEL.RPN.PRE_NMS_TOPK_TRAIN": 2000,
    "MODEL.RPN.POST_NMS_TOPK_TRAIN": 1000,
    "MODEL.RPN.PRE_NMS_TOPK_TEST": 1000,
    "MODEL.RPN.POST_NMS_TOPK_TEST": 1000,
    "MODEL.RPN.NMS_THRESH": 0.7,
    "MODEL.ROI_HEADS.IOU_THRESHOLDS": [0.5],
    "MODEL.ROI_HEADS.PROPOSAL_APPEND_GT": True,
    "MODEL.ROI_HEADS.SCORE_THRESH_TEST": 0.4,
    "MODEL.ROI_HEADS.NMS_THRESH_TEST": 0.5,
    "MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0),
    "MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG": False,
    "MODEL.ROI_BOX_HEAD.FC_DIM": 1024,
}
RECIPES = {
    "rs_faster_rcnn_R50_FPN_1x.yaml": {**RCNN_RECIPE, "MODEL.MASK_ON": False},
    "rs_mask_rcnn_R50_FPN_1x.yaml": {
        **RCNN_RECIPE,
        "MODEL.MASK_ON": True,
        "MODEL.ROI_MASK_HEAD.NAME": "RankSortMaskHead",
        "MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION": 14,
        "MODEL.ROI_MASK_HEAD.NUM_CONV": 4,
        "MODEL.ALRP.MASK_MAX_POSITIVES": 200,
    },
    "rs_atss_R50_FPN_1x.yaml": {
        **COMMON_RECIPE,
        "SOLVER.BASE_LR": 0.008,
        "MODEL.META_ARCHITECTURE": "RankSortATSS",
        "MODEL.BACKBONE.NAME": "build_fcos_resnet_fpn_backbone",
        "MODEL.ALRP.MATCHER": "atss",
        "MODEL.ALRP.ATSS_TOPK": 9,
        "MODEL.ALRP.OFFICIAL_INFERENCE": True,
        "MODEL.RETINANET.NORM": "GN",
        "MODEL.RETINANET.NUM_CONVS": 4,
        "MODEL.RETINANET.BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0),
        "MODEL.RETINANET.SCORE_THRESH_TEST": 0.05,
        "MODEL.RETINANET.NMS_THRESH_TEST": 0.6,
        "MODEL.RETINANET.TOPK_CANDIDATES_TEST": 1000,
        "MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS": [[1.0]],
    },
}


@pytest.mark.parametrize("config", list(RECIPES))
def test_config_is_the_official_recipe(config):
    cfg = setup_cfg(f"{CONFIG_DIR}/{config}")
    for key, expected in RECIPES[config].items():
        value = cfg
        for part in key.split("."):
            value = value[part]
        assert value == (pytest.approx(expected) if isinstance(expected, float) else expected), key
    if config == "rs_atss_R50_FPN_1x.yaml":
        sizes = cfg.MODEL.ANCHOR_GENERATOR.SIZES
        expected_sizes = [[4 * stride * 2 ** (i / 3) for i in range(3)] for stride in (8, 16, 32, 64, 128)]
        assert sizes == [pytest.approx(level, rel=1e-5) for level in expected_sizes]
