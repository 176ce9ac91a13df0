"""The paper configs build the official detectors, stage by stage: the reduced-width official networks of
tests/fixtures/official (written by tools/official_reference.py from the official code), converted by
tools/convert_official_checkpoint.py into the models of the project configs that the converter maps them to, fed
the same images and ground truths, compute

- the backbone features C2-C5 and the FPN levels (P3-P7, P2-P6 for Faster R-CNN),
- the head outputs, the anchors (bit for bit) or FoveaBox's locations,
- the assignment (identical labels and matched ground truths, exact ties included), the box-coding targets and
  the localisation errors of the positives,
- the losses and their gradients with respect to every head output,
- Faster R-CNN's proposals (training and test), RoI assignment, box-head outputs on the official RoIs, RoI losses
  and gradients,
- the detections of each test image at the network's resolution and rescaled, in the official order,

within 1e-5 of the official values (relative to the largest official magnitude), boxes of the detections within
1e-3 px. Every detector family of the 14 published models is here: RetinaNet with IoU assignment (aLRP Loss, AP
Loss + Smooth L1), ATSS at 500 and 800 (3 scales per octave), ResNeXt with DCNv2 (through the CPU path of
alrp_d2/modeling/deform_conv.py), FoveaBox (focal loss, AP Loss, aLRP Loss), Faster R-CNN (cross-entropy with L1
and with GIoU, aLRP Loss). The random samplers of the cross-entropy baselines cannot be matched: their RPN losses
are compared on the official samples (their RoI samplers keep every RoI of these images).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any, Dict, List, Tuple

import pytest
import torch
from detectron2.structures import Boxes, Instances, pairwise_iou
from detectron2.utils.events import EventStorage
from torch import Tensor

from .official_fixtures import (
    converted_model,
    inputs,
    load_converter,
    official_anchor_index,
    relative_error,
    reorder_blocks,
)

TOLERANCE = 1e-5
BOX_TOLERANCE = 1e-3  # px
NUM_CLASSES = 80

DENSE = [
    ("retinanet_iou", "alrp"),
    ("retinanet_iou", "ap"),
    ("atss_500", "alrp"),
    ("atss_800", "alrp"),
    ("atss_dcn_800", "alrp"),
    ("foveabox", "focal"),
    ("foveabox", "ap"),
    ("foveabox", "alrp"),
]
TWO_STAGE = [("faster_rcnn_ce", "l1"), ("faster_rcnn_ce", "giou"), ("faster_rcnn_alrp", "alrp")]
# The official loss keys and ours.
LOSS_KEYS = {
    ("retinanet_iou", "alrp"): {"loss_cls": "loss_retinanet_cls", "loss_bbox": "loss_retinanet_loc"},
    ("foveabox", "focal"): {"loss_cls": "loss_cls", "loss_bbox": "loss_box_reg"},
    ("foveabox", "alrp"): {"loss_cls": "loss_fovea_cls", "loss_bbox": "loss_fovea_loc"},
}
LOSS_KEYS[("retinanet_iou", "ap")] = LOSS_KEYS[("atss_500", "alrp")] = LOSS_KEYS[("retinanet_iou", "alrp")]
LOSS_KEYS[("atss_800", "alrp")] = LOSS_KEYS[("atss_dcn_800", "alrp")] = LOSS_KEYS[("retinanet_iou", "alrp")]
LOSS_KEYS[("foveabox", "ap")] = LOSS_KEYS[("foveabox", "alrp")]
RPN_LOSS_KEYS = {"loss_rpn_cls": "loss_rpn_cls", "loss_rpn_bbox": "loss_rpn_loc"}
ROI_LOSS_KEYS = {
    "l1": {"loss_cls": "loss_cls", "loss_bbox": "loss_box_reg"},
    "giou": {"loss_cls": "loss_cls", "loss_bbox": "loss_box_reg"},
    "alrp": {"loss_cls": "loss_box_cls", "loss_bbox": "loss_box_loc"},
}


# ---------------------------------------------------------------------------------------------------------------
# Inputs and recording.
# ---------------------------------------------------------------------------------------------------------------


def training_inputs() -> List[Dict[str, Any]]:
    """The fixture's two images (unpadded; the model pads them to the same 64 x 64 batch) with their ground
    truths."""
    data = inputs()
    batch = []
    for image, (height, width), boxes, labels in zip(
        data["images"], data["train_metas"]["img_shape"].tolist(), data["gt_bboxes"], data["gt_labels"]
    ):
        gt = Instances((height, width))
        gt.gt_boxes = Boxes(boxes.clone())
        gt.gt_classes = labels.clone()
        batch.append({"image": image[:, :height, :width].clone(), "instances": gt})
    return batch


def image_for_test(index: int, rescale: bool) -> Dict[str, Any]:
    """Test image ``index`` alone, asked for at its original size (rescaled) or at the network's."""
    data = inputs()
    height, width = data["test_metas"]["img_shape"][index].tolist()
    out_height, out_width = data["test_metas"]["ori_shape"][index].tolist() if rescale else (height, width)
    return {"image": data["images"][index, :, :height, :width].clone(), "height": out_height, "width": out_width}


def tensors_of(value: Any) -> List[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    return [t for item in value for t in tensors_of(item)] if isinstance(value, (list, tuple)) else []


def record_output(module: torch.nn.Module, store: Dict[str, Any], key: str, retain_grad: bool = False):
    """Keeps the last output of ``module`` in ``store[key]`` (its tensors keeping their gradients with
    ``retain_grad``); returns the hook's handle."""

    def hook(_module, _inputs, output):
        if retain_grad and torch.is_grad_enabled():
            for tensor in tensors_of(output):
                tensor.retain_grad()
        store[key] = output

    return module.register_forward_hook(hook)


def record_call(owner: Any, name: str, store: Dict[str, Any], key: str = "") -> None:
    """Records the arguments and the result of ``owner.name`` (an instance attribute shadowing the method) in
    ``store[key or name]``."""
    original = getattr(owner, name)

    def wrapper(*args):
        result = original(*args)
        store[key or name] = (args, result)
        return result

    setattr(owner, name, wrapper)


def gradients(losses: Dict[str, Tensor], outputs: Dict[str, List[Tensor]]) -> Dict[str, Dict[str, List[Tensor]]]:
    """d loss / d output of every loss and every head output (None where a loss does not depend on it)."""
    flat = [(name, tensor) for name, tensors in outputs.items() for tensor in tensors]
    result = {}
    for key, loss in losses.items():
        grads = torch.autograd.grad(loss, [t for _, t in flat], retain_graph=True, allow_unused=True)
        per_output: Dict[str, List[Tensor]] = {name: [] for name in outputs}
        for (name, _), grad in zip(flat, grads):
            per_output[name].append(grad)
        result[key] = per_output
    return result


def compare_gradients(ours: Dict, official: Dict, keys: Dict[str, str], order: Tensor, names: Dict[str, str]) -> None:
    """Every official d loss / d output (``names``: official output name -> ours) equals ours; an output the official
    loss does not depend on gets no gradient from ours either."""
    for official_key, our_key in keys.items():
        for official_name, our_name in names.items():
            for level, ours_grad in enumerate(ours[our_key][our_name]):
                official_grads = official.get(official_key, {}).get(official_name)
                if official_grads is None or official_grads[level] is None:
                    assert ours_grad is None or ours_grad.abs().max() == 0, (our_key, our_name, level)
                    continue
                expected = reorder_blocks(official_grads[level], order) if order is not None else official_grads[level]
                error = relative_error(ours_grad, expected)
                assert error < TOLERANCE, f"d {our_key} / d {our_name}[{level}]: {error:.2g}"


def assert_detections_equal(ours: Instances, official: Dict[str, Tensor]) -> None:
    """The same detections in the same order: labels identical, boxes within 1e-3 px, scores within 1e-5."""
    assert len(ours) == len(official["boxes"]), (len(ours), len(official["boxes"]))
    assert torch.equal(ours.pred_classes, official["labels"])
    assert (ours.pred_boxes.tensor - official["boxes"]).abs().max() < BOX_TOLERANCE
    assert (ours.scores - official["scores"]).abs().max() < TOLERANCE


def assert_pyramid_equal(run: Run, fixture: Dict) -> None:
    for level, (ours, official) in enumerate(zip(run.stages, fixture["backbone_features"]), start=2):
        assert relative_error(ours, official) < TOLERANCE, f"C{level}"
    assert len(run.pyramid) == len(fixture["neck_features"])
    for name, official in zip(run.pyramid, fixture["neck_features"]):
        assert relative_error(run.pyramid[name], official) < TOLERANCE, name


@dataclass
class Run:
    """One training forward and backward of a converted model on the fixture's batch; its test detections are
    computed on first use (:meth:`detections`)."""

    fixture: Dict[str, Any]
    model: Any = None
    stages: List[Tensor] = field(default_factory=list)
    pyramid: Dict[str, Tensor] = field(default_factory=dict)
    outputs: Dict[str, List[Tensor]] = field(default_factory=dict)
    calls: Dict[str, Any] = field(default_factory=dict)
    losses: Dict[str, Tensor] = field(default_factory=dict)
    grads: Dict[str, Dict[str, List[Tensor]]] = field(default_factory=dict)
    test_detections: Dict[bool, List[Instances]] = field(default_factory=dict)

    def detections(self, rescale: bool) -> List[Instances]:
        """The detections of every test image alone, at the network's resolution or rescaled."""
        if not self.test_detections:
            self.test_detections = evaluate_test_images(self.model)
        return self.test_detections[rescale]


def record_backbone(model, store: Dict[str, Any]) -> None:
    for index, stage in enumerate(model.backbone.bottom_up.stages):
        record_output(stage, store, f"C{index + 2}")
    record_output(model.backbone, store, "pyramid")


def evaluate_test_images(model) -> Dict[bool, List[Instances]]:
    """The detections of every test image alone, at the network's resolution (False) and rescaled (True)."""
    model.eval()
    with torch.no_grad():
        return {
            rescale: [model([image_for_test(i, rescale)])[0]["instances"] for i in range(len(inputs()["images"]))]
            for rescale in (False, True)
        }


# ---------------------------------------------------------------------------------------------------------------
# Dense detectors: RetinaNet (IoU, ATSS, DCN) and FoveaBox.
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class DenseRun(Run):
    variant: str = ""
    transform: Any = None  # the model's box coding
    order: Tensor = field(default_factory=lambda: torch.arange(1))  # our anchor a is official anchor order[a]
    official_index: Tensor = field(default_factory=lambda: torch.arange(1))  # per anchor of our concatenation


@cache
def dense_run(name: str, variant: str, overrides: Tuple[str, ...] = ()) -> DenseRun:
    fixture, cfg, model = converted_model(name, variant, overrides)
    store: Dict[str, Any] = {}
    record_backbone(model, store)
    record_output(model.head, store, "head", retain_grad=True)
    record_output(model.anchor_generator, store, "anchors")
    record_call(model, "label_anchors", store)
    if hasattr(model, "ranking_loss"):
        record_call(model.ranking_loss.criterion, "localisation_losses", store)
    model.train()
    with EventStorage():
        losses = model(training_inputs())
    logits, deltas = store["head"]
    run = DenseRun(fixture, model, losses=losses, calls=store, variant=variant, transform=model.box2box_transform)
    run.stages = [store[f"C{level}"] for level in range(2, 6)]
    run.pyramid = store["pyramid"]
    run.outputs = {"cls_scores": list(logits), "bbox_preds": list(deltas)}
    run.grads = gradients(losses, run.outputs)
    if fixture["meta"]["kind"] == "anchor":
        anchors = cfg.MODEL.ANCHOR_GENERATOR
        run.order = load_converter().anchor_permutation(len(anchors.SIZES[0]), len(anchors.ASPECT_RATIOS[0]))
    else:
        run.order = torch.arange(1)
    locations = [level.shape[-2] * level.shape[-1] for level in logits]
    run.official_index = official_anchor_index(locations, run.order)
    return run


def dense_params():
    return [pytest.param(name, variant, id=f"{name}-{variant}") for name, variant in DENSE]


@pytest.mark.parametrize("name, variant", dense_params())
def test_dense_features(name, variant):
    run = dense_run(name, variant)
    assert_pyramid_equal(run, run.fixture)
    if name == "atss_dcn_800":  # the DCNv2 offsets and masks are exercised (the official ones are not zero)
        offsets = [m.weight for n, m in run.model.named_modules() if n.endswith("conv2_offset")]
        assert len(offsets) == 13 and all(weight.abs().sum() > 0 for weight in offsets)


@pytest.mark.parametrize("name, variant", dense_params())
def test_dense_head_outputs(name, variant):
    run = dense_run(name, variant)
    official = run.fixture["network"]["head"]
    for level, (logits, deltas) in enumerate(zip(run.outputs["cls_scores"], run.outputs["bbox_preds"])):
        assert relative_error(logits, reorder_blocks(official["cls_scores"][level], run.order)) < TOLERANCE
        assert relative_error(deltas, reorder_blocks(official["bbox_preds"][level], run.order)) < TOLERANCE


@pytest.mark.parametrize("name, variant", dense_params())
def test_dense_anchors_are_the_official_ones_bit_for_bit(name, variant):
    run = dense_run(name, variant)
    ours = torch.cat([anchors.tensor for anchors in run.calls["anchors"]])
    network = run.fixture["network"]
    if "anchors" in network:
        official = torch.cat(network["anchors"])[run.official_index]
        assert torch.equal(ours, official)
    else:  # FoveaBox: a square of the level's base edge on each location (x + 0.5, y + 0.5) * stride
        centres = Boxes(ours).get_centers()
        strides = [8, 16, 32, 64, 128]
        official = torch.cat(
            [torch.stack([p["x"].flatten(), p["y"].flatten()], dim=1) * s for p, s in zip(network["points"], strides)]
        )
        assert torch.equal(centres, official)


def official_dense_assignment(run: DenseRun) -> Tuple[Tensor, Tensor]:
    """(N, R) official labels (class, 80 for background, -1 ignored) and matched ground-truth index (-1 for none)
    in our anchor order."""
    calls = run.fixture["variants"][run.variant]["train"]["calls"]
    gt_labels = inputs()["gt_labels"]
    labels, matched = [], []
    if "assign" in calls:
        for record, classes in zip(calls["assign"], gt_labels):
            gt_inds = record["output"]["gt_inds"][run.official_index]
            label = torch.where(gt_inds > 0, classes[(gt_inds - 1).clamp(min=0)], NUM_CLASSES)
            labels.append(torch.where(gt_inds < 0, -1, label))
            matched.append(torch.where(gt_inds > 0, gt_inds - 1, -1))
        return torch.stack(labels), torch.stack(matched)
    # FoveaBox: get_targets labels, level-major then image; the matched box is the one its targets encode.
    flat_labels, _ = calls["get_targets"][0]["output"]
    return per_image(flat_labels, run)[:, run.official_index], None


def per_image(level_major: Tensor, run: DenseRun) -> Tensor:
    """(N, R, ...) from an official (level, image, location) concatenation."""
    num_images = len(inputs()["images"])
    sizes = [level.shape[-2] * level.shape[-1] * len(run.order) for level in run.outputs["cls_scores"]]
    chunks = torch.split(level_major, [num_images * size for size in sizes])
    return torch.cat([chunk.reshape(num_images, size, *chunk.shape[1:]) for chunk, size in zip(chunks, sizes)], 1)


@pytest.mark.parametrize("name, variant", dense_params())
def test_dense_assignment_is_identical(name, variant):
    run = dense_run(name, variant)
    (_, gt_instances), (our_labels, our_boxes) = run.calls["label_anchors"]
    official_labels, official_matched = official_dense_assignment(run)
    assert torch.equal(torch.stack(our_labels), official_labels)
    if official_matched is not None:
        gt = inputs()["gt_bboxes"]
        for image, (boxes, matched) in enumerate(zip(our_boxes, official_matched)):
            positive = matched >= 0
            assert torch.equal(boxes[positive], gt[image][matched[positive]])


@pytest.mark.parametrize("name, variant", dense_params())
def test_dense_box_coding_targets(name, variant):
    """The encoded targets of the positives (RetinaNet's deltas, FoveaBox's clamped log-distances)."""
    run = dense_run(name, variant)
    (anchors, _), (labels, matched_boxes) = run.calls["label_anchors"]
    anchors = Boxes.cat(anchors).tensor
    calls = run.fixture["variants"][variant]["train"]["calls"]
    if "encode" in calls:
        inverse = torch.argsort(run.official_index)
        for image, record in enumerate(calls["encode"]):
            official_positive = torch.nonzero(calls["assign"][image]["output"]["gt_inds"] > 0).flatten()
            ours = inverse[official_positive]
            deltas = run.transform.get_deltas(anchors[ours], matched_boxes[image][ours])
            assert relative_error(deltas, record["output"]) < TOLERANCE
    else:
        _, official_targets = calls["get_targets"][0]["output"]
        official_targets = per_image(official_targets, run)[:, run.official_index]
        for image in range(len(labels)):
            positive = labels[image] < NUM_CLASSES
            deltas = run.transform.get_deltas(anchors[positive], matched_boxes[image][positive])
            assert relative_error(deltas, official_targets[image][positive]) < TOLERANCE


def official_positive_keys(run: DenseRun) -> Tensor:
    """image * R + official anchor index of each official positive, in the official order (level, image, anchor)."""
    labels, _ = official_dense_assignment(run)
    num_anchors = labels.shape[1]
    image, anchor = torch.nonzero((labels >= 0) & (labels < NUM_CLASSES), as_tuple=True)
    keys = image * num_anchors + run.official_index[anchor]
    level_of = torch.bucketize(run.official_index[anchor], level_offsets(run), right=True)
    return keys[torch.argsort(level_of * len(labels) * num_anchors + keys, stable=True)]


def level_offsets(run: DenseRun) -> Tensor:
    sizes = [level.shape[-2] * level.shape[-1] * len(run.order) for level in run.outputs["cls_scores"]]
    return torch.cumsum(torch.tensor(sizes), 0)[:-1]


@pytest.mark.parametrize("name, variant", [p for p in dense_params() if p.values[1] == "alrp"])
def test_dense_localisation_errors(name, variant):
    """E_loc of every positive (aLRP Loss: 1 - GIoU; FoveaBox against its decoded clamped target)."""
    run = dense_run(name, variant)
    (positives, _), ours = run.calls["localisation_losses"]
    official = run.fixture["variants"][variant]["train"]["calls"]["ranking_loss"][0]["regression_losses"]
    num_anchors = len(run.official_index)
    rows = positives.row
    our_keys = (rows // num_anchors) * num_anchors + run.official_index[rows % num_anchors]
    official_keys = official_positive_keys(run)
    assert torch.equal(torch.sort(our_keys).values, torch.sort(official_keys).values)
    ours_sorted = ours[torch.argsort(our_keys)]
    official_sorted = official[torch.argsort(official_keys)]
    assert relative_error(ours_sorted.detach(), official_sorted) < TOLERANCE


@pytest.mark.parametrize("name, variant", dense_params())
def test_dense_losses_and_gradients(name, variant):
    run = dense_run(name, variant)
    official = run.fixture["variants"][variant]["train"]
    keys = LOSS_KEYS[(name, variant)]
    for official_key, our_key in keys.items():
        error = relative_error(run.losses[our_key].detach(), official["losses"][official_key])
        assert error < TOLERANCE, f"{our_key}: {error:.2g}"
    names = {"cls_scores": "cls_scores", "bbox_preds": "bbox_preds"}
    compare_gradients(run.grads, official["grads"], keys, run.order, names)


@pytest.mark.parametrize("name, variant", dense_params())
@pytest.mark.parametrize("rescale", [False, True], ids=["network_size", "rescaled"])
def test_dense_detections(name, variant, rescale):
    run = dense_run(name, variant)
    official = run.fixture["test"][f"rescale_{str(rescale).lower()}"]
    for ours, expected in zip(run.detections(rescale), official):
        assert_detections_equal(ours, expected)


# ---------------------------------------------------------------------------------------------------------------
# Faster R-CNN: cross-entropy (L1, GIoU) and aLRP Loss.
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class TwoStageRun(Run):
    variant: str = ""
    train_proposals: List[Instances] = field(default_factory=list)
    sampled: List[Instances] = field(default_factory=list)  # the RoIs of the box head in training, per image
    rpn_losses: Dict[str, Tensor] = field(default_factory=dict)  # on the official samples for the CE RPN
    test_proposals: List[Instances] = field(default_factory=list)


def official_rpn_labels(fixture: Dict, variant: str, official_index: Tensor) -> List[Tensor]:
    """The official RPN's sampled labels per image in our anchor order: 1 / 0 sampled positive / negative, -1
    not sampled or ignored."""
    labels, weights, _, _ = fixture["variants"][variant]["train"]["calls"]["rpn_get_targets"][0]["output"]
    labels = torch.cat(labels, dim=1)[:, official_index].long()
    weights = torch.cat(weights, dim=1)[:, official_index]
    return list(torch.where(weights, labels, -1).unbind(0))


@cache
def two_stage_run(name: str, variant: str, overrides: Tuple[str, ...] = ()) -> TwoStageRun:
    fixture, cfg, model = converted_model(name, variant, overrides)
    rpn, roi_heads = model.proposal_generator, model.roi_heads
    store: Dict[str, Any] = {}
    record_backbone(model, store)
    record_output(rpn.rpn_head, store, "rpn_head", retain_grad=True)
    record_output(rpn.anchor_generator, store, "anchors")
    record_output(rpn, store, "rpn")
    record_output(roi_heads.box_predictor, store, "box_predictor", retain_grad=True)
    record_call(rpn, "losses", store)
    record_call(roi_heads, "label_and_sample_proposals", store)
    if name == "faster_rcnn_alrp":  # the criteria's localisation losses: (positives, boxes) -> E_loc
        record_call(rpn.ranking_loss.criterion, "localisation_losses", store, "rpn_loc_losses")
        record_call(roi_heads.box_predictor.ranking_loss.criterion, "localisation_losses", store, "box_loc_losses")
    model.train()
    with EventStorage():
        losses = model(training_inputs())
        logits, deltas = store["rpn_head"]
        locations = [level.shape[-2] * level.shape[-1] for level in logits]
        official_index = official_anchor_index(locations, torch.arange(logits[0].shape[1]))
        if name == "faster_rcnn_ce":  # detectron2's random sample replaced by the official one
            anchors, rpn_logits, _, rpn_deltas, gt_boxes = store["losses"][0]
            gt_labels = official_rpn_labels(fixture, variant, official_index)
            rpn_losses = type(rpn).losses(rpn, anchors, rpn_logits, gt_labels, rpn_deltas, gt_boxes)
        else:
            rpn_losses = {key: value for key, value in losses.items() if key.startswith("loss_rpn")}
    run = TwoStageRun(fixture, model, losses=losses, calls=store, variant=variant, rpn_losses=rpn_losses)
    run.stages = [store[f"C{level}"] for level in range(2, 6)]
    run.pyramid = store["pyramid"]
    run.outputs = {"rpn_cls_scores": list(logits), "rpn_bbox_preds": list(deltas)}
    run.train_proposals = store["rpn"][0]
    run.sampled = store["label_and_sample_proposals"][1]
    run.calls["official_index"] = official_index
    run.grads = gradients(run.rpn_losses, run.outputs)
    scores, box_deltas = store["box_predictor"]
    roi_losses = {key: value for key, value in losses.items() if not key.startswith("loss_rpn")}
    run.grads.update(gradients(roi_losses, {"cls_score": [scores], "bbox_pred": [box_deltas]}))
    test_proposals: Dict[str, Any] = {}
    handle = record_output(rpn, test_proposals, "rpn")
    proposals = []
    model.eval()
    with torch.no_grad():
        for index in range(len(inputs()["images"])):
            model([image_for_test(index, False)])
            proposals.append(test_proposals["rpn"][0][0])
    handle.remove()
    run.test_proposals = proposals
    return run


def two_stage_params():
    return [pytest.param(name, variant, id=f"{name}-{variant}") for name, variant in TWO_STAGE]


@pytest.mark.parametrize("name, variant", two_stage_params())
def test_two_stage_features_and_rpn_outputs(name, variant):
    run = two_stage_run(name, variant)
    assert_pyramid_equal(run, run.fixture)
    official = run.fixture["network"]["head"]
    for level, (logits, deltas) in enumerate(zip(run.outputs["rpn_cls_scores"], run.outputs["rpn_bbox_preds"])):
        assert relative_error(logits, official["rpn_cls_scores"][level]) < TOLERANCE
        assert relative_error(deltas, official["rpn_bbox_preds"][level]) < TOLERANCE
    ours = torch.cat([anchors.tensor for anchors in run.calls["anchors"]])
    assert torch.equal(ours, torch.cat(run.fixture["network"]["anchors"])[run.calls["official_index"]])


@pytest.mark.parametrize("name, variant", two_stage_params())
def test_rpn_assignment_is_identical(name, variant):
    """The RPN's labels and matched ground truths (0.7 / 0.3, low-quality matches at IoU >= 0.3, a tied anchor
    going to the later ground truth)."""
    run = two_stage_run(name, variant)
    for image, (labels, matched, gt_inds) in enumerate(rpn_assignment(run)):
        assert torch.equal(labels.long(), torch.where(gt_inds > 0, 1, gt_inds)), image
        assert torch.equal(matched[gt_inds > 0], gt_inds[gt_inds > 0] - 1), image


def rpn_assignment(run: TwoStageRun) -> List[Tuple[Tensor, Tensor, Tensor]]:
    """Per image, our RPN's labels and matched ground truths, and the official gt_inds, in our anchor order."""
    anchors = Boxes(torch.cat([anchors.tensor for anchors in run.calls["anchors"]]))
    matcher = run.model.proposal_generator.anchor_matcher
    records = run.fixture["variants"][run.variant]["train"]["calls"]["rpn_assign"]
    result = []
    for gt, record in zip(inputs()["gt_bboxes"], records):
        matched, labels = matcher(pairwise_iou(Boxes(gt), anchors))
        result.append((labels, matched, record["output"]["gt_inds"][run.calls["official_index"]]))
    return result


def test_two_stage_localisation_errors():
    """aLRP Faster R-CNN: E_loc of the RPN's positives (tau 0.7) and of the box head's (the same multisets; the
    positives' order differs between the frameworks)."""
    run = two_stage_run("faster_rcnn_alrp", "alrp")
    calls = run.fixture["variants"]["alrp"]["train"]["calls"]
    for ours, official in (("rpn_loc_losses", "rpn_ranking_loss"), ("box_loc_losses", "roi_ranking_loss")):
        (targets, _), loc_errors = run.calls[ours]
        expected = calls[official][0]["regression_losses"]
        assert len(loc_errors) == len(expected) == len(targets.row) > 0
        assert relative_error(torch.sort(loc_errors.detach()).values, torch.sort(expected).values) < TOLERANCE


def assert_proposals_equal(ours: Instances, official: Tensor) -> None:
    assert len(ours) == len(official)
    assert (ours.proposal_boxes.tensor - official[:, :4]).abs().max() < BOX_TOLERANCE
    assert (ours.objectness_logits.sigmoid() - official[:, 4]).abs().max() < TOLERANCE


@pytest.mark.parametrize("name, variant", two_stage_params())
def test_proposals_in_training_and_test(name, variant):
    """Zero-area proposals (clipped anchors of the padding) included."""
    run = two_stage_run(name, variant)
    for ours, official in zip(run.train_proposals, run.fixture["network"]["proposals"]):
        assert_proposals_equal(ours, official)
    for ours, official in zip(run.test_proposals, run.fixture["test"]["proposals"]):
        assert_proposals_equal(ours, official)


@pytest.mark.parametrize("name, variant", two_stage_params())
def test_roi_assignment_is_identical(name, variant):
    run = two_stage_run(name, variant)
    calls = run.fixture["variants"][variant]["train"]["calls"]
    matcher = run.model.roi_heads.proposal_matcher
    for gt, proposals, record in zip(inputs()["gt_bboxes"], run.fixture["network"]["proposals"], calls["roi_assign"]):
        matched, labels = matcher(pairwise_iou(Boxes(gt), Boxes(proposals[:, :4])))
        gt_inds = record["output"]["gt_inds"]
        assert torch.equal(labels.long(), (gt_inds > 0).long())
        assert torch.equal(matched[gt_inds > 0], gt_inds[gt_inds > 0] - 1)


@pytest.mark.parametrize("name, variant", two_stage_params())
@torch.no_grad()
def test_box_head_on_the_official_rois(name, variant):
    """RoIAlign (zero-area RoIs included) and the box head."""
    run = two_stage_run(name, variant)
    roi_heads = run.model.roi_heads
    rois = run.fixture["network"]["rois"]
    boxes = [Boxes(rois[rois[:, 0] == image, 1:]) for image in range(len(inputs()["images"]))]
    features = [run.pyramid[f] for f in roi_heads.box_in_features]
    scores, deltas = roi_heads.box_predictor(roi_heads.box_head(roi_heads.box_pooler(features, boxes)))
    official = run.fixture["network"]["box_head"]
    assert relative_error(scores, official["cls_score"]) < TOLERANCE
    assert relative_error(deltas, official["bbox_pred"]) < TOLERANCE


def official_row_order(run: TwoStageRun) -> Tensor:
    """For each official RoI (image-major), the row of the same box among ours (the box head's training RoIs);
    identical boxes (e.g. two clipped to the same empty box) take distinct rows."""
    rois = run.fixture["network"]["rois"]
    ours = torch.cat([p.proposal_boxes.tensor for p in run.sampled])
    image_of_ours = torch.cat([torch.full((len(p),), i) for i, p in enumerate(run.sampled)])
    distance = (rois[:, None, 1:] - ours[None]).abs().amax(-1)
    distance[rois[:, :1] != image_of_ours[None].float()] = float("inf")
    assert len(rois) == len(ours)
    order = []
    for row in distance:
        row[order] = float("inf")
        order.append(int(row.argmin()))
        assert row[order[-1]] < BOX_TOLERANCE
    return torch.tensor(order)


@pytest.mark.parametrize("name, variant", two_stage_params())
def test_rpn_losses_and_gradients(name, variant):
    """The RPN's losses (the cross-entropy baselines' on the official sample; mmdetection returns them per level)
    and their gradients with respect to the RPN head's outputs equal the official ones."""
    run = two_stage_run(name, variant)
    official = run.fixture["variants"][variant]["train"]
    for official_key, our_key in RPN_LOSS_KEYS.items():
        expected = official["rpn_losses"][official_key]
        expected = torch.stack(expected).sum() if isinstance(expected, list) else expected
        error = relative_error(run.rpn_losses[our_key].detach(), expected)
        assert error < TOLERANCE, f"{our_key}: {error:.2g}"
    names = {"rpn_cls_scores": "rpn_cls_scores", "rpn_bbox_preds": "rpn_bbox_preds"}
    compare_gradients(run.grads, official["rpn_grads"], RPN_LOSS_KEYS, None, names)


@pytest.mark.parametrize("name, variant", two_stage_params())
def test_roi_losses_and_gradients(name, variant):
    """The box head trains on the official RoIs (every proposal, and for the cross-entropy baselines the ground
    truths), with the official losses and gradients."""
    run = two_stage_run(name, variant)
    official = run.fixture["variants"][variant]["train"]
    keys = ROI_LOSS_KEYS[variant]
    for official_key, our_key in keys.items():
        error = relative_error(run.losses[our_key].detach(), official["roi_losses"][official_key])
        assert error < TOLERANCE, f"{our_key}: {error:.2g}"
    order = official_row_order(run)
    for official_key, our_key in keys.items():
        for name_ in ("cls_score", "bbox_pred"):
            (ours,) = run.grads[our_key][name_]
            expected = official["roi_grads"].get(official_key, {}).get(name_)
            if expected is None:
                assert ours is None or ours.abs().max() == 0, (our_key, name_)
            else:
                assert relative_error(ours[order], expected[0]) < TOLERANCE, (our_key, name_)


@pytest.mark.parametrize("name, variant", two_stage_params())
@pytest.mark.parametrize("rescale", [False, True], ids=["network_size", "rescaled"])
def test_two_stage_detections(name, variant, rescale):
    run = two_stage_run(name, variant)
    official = run.fixture["test"][f"rescale_{str(rescale).lower()}"]
    for ours, expected in zip(run.detections(rescale), official):
        assert_detections_equal(ours, expected)


# ---------------------------------------------------------------------------------------------------------------
# Controls: with detectron2's conventions the same stages differ, so the fixtures exercise every key.
# ---------------------------------------------------------------------------------------------------------------


def test_detectron2_p7_takes_relu_of_p6():
    run = dense_run("retinanet_iou", "alrp", ("MODEL.FPN.RELU_BEFORE_P7", "True"))
    assert relative_error(run.pyramid["p7"], run.fixture["neck_features"][-1]) > 0.1


def test_rounded_anchor_sizes_lose_the_exact_iou_tie():
    """detectron2's generator with the sizes the config lists (4 decimals): the box at exactly IoU 0.5 with an
    anchor is no longer a positive of it."""
    run = dense_run("retinanet_iou", "alrp", ("MODEL.ANCHOR_GENERATOR.NAME", "DefaultAnchorGenerator"))
    (_, _), (labels, _) = run.calls["label_anchors"]
    official_labels, _ = official_dense_assignment(run)
    assert not torch.equal(torch.stack(labels), official_labels)


def test_detectron2_low_quality_matches_keep_the_max_iou_ground_truth():
    run = dense_run("retinanet_iou", "alrp", ("MODEL.ALRP.LOW_QUALITY_MATCH_GT", "max_iou"))
    (_, _), (labels, boxes) = run.calls["label_anchors"]
    _, official_matched = official_dense_assignment(run)
    gt = inputs()["gt_bboxes"][0]
    positive = official_matched[0] >= 0
    assert not torch.equal(boxes[0][positive], gt[official_matched[0][positive]])
    two_stage = two_stage_run("faster_rcnn_alrp", "alrp", ("MODEL.ALRP.LOW_QUALITY_MATCH_GT", "max_iou"))
    _, matched, gt_inds = rpn_assignment(two_stage)[1]
    assert not torch.equal(matched[gt_inds > 0], gt_inds[gt_inds > 0] - 1)


@pytest.mark.parametrize(
    "key, value",
    [
        ("MODEL.FOVEABOX.ALRP_LOC_TARGET", "gt_box"),
        ("MODEL.FOVEABOX.CLIP_TO_LAST_PIXEL", "False"),
        ("TEST.KEEP_EMPTY_DETECTIONS", "False"),
    ],
)
def test_foveabox_with_detectron2_conventions_differs(key, value):
    run = dense_run("foveabox", "alrp", (key, value))
    if key.endswith("ALRP_LOC_TARGET"):  # the thin object's clamped target
        _, ours = run.calls["localisation_losses"]
        official = run.fixture["variants"]["alrp"]["train"]["calls"]["ranking_loss"][0]["regression_losses"]
        assert (torch.sort(ours.detach()).values - torch.sort(official).values).abs().max() > 1e-3
        return
    official = run.fixture["test"]["rescale_false"]
    differs = [
        len(ours) != len(expected["boxes"]) or (ours.pred_boxes.tensor - expected["boxes"]).abs().max() > 0.5
        for ours, expected in zip(run.detections(False), official)
    ]
    assert any(differs)


def test_detectron2_drops_zero_area_proposals():
    run = two_stage_run("faster_rcnn_ce", "l1", ("MODEL.PROPOSAL_GENERATOR.MIN_SIZE", "0"))
    official = run.fixture["network"]["proposals"]
    assert any(
        (ours.proposal_boxes.tensor - expected[:, :4]).abs().max() > 1e-2
        for ours, expected in zip(run.train_proposals, official)
    )
