"""AlrpRetinaNet inference: the official test order (MODEL.ALRP.OFFICIAL_INFERENCE) and detectron2's."""

import pytest
import torch
from detectron2.modeling import RetinaNet, build_model
from detectron2.structures import Boxes
from torchvision.ops import batched_nms

from .tiny_configs import tiny_batch, tiny_retinanet_cfg


def tiny_model(official: bool):
    model = build_model(tiny_retinanet_cfg(OFFICIAL_INFERENCE=official))
    return model.eval()


def detect(model, anchors, scores, image_size=(100, 100)):
    """``inference_single_image`` on one level of anchors with zero deltas (boxes = anchors)."""
    anchor_boxes = Boxes(torch.tensor(anchors, dtype=torch.float32))
    scores = torch.tensor(scores, dtype=torch.float32)
    return model.inference_single_image([anchor_boxes], [scores], [torch.zeros(len(anchors), 4)], image_size)


def detections(result):
    return sorted(
        (round(s, 4), c, tuple(round(v, 3) for v in b))
        for s, c, b in zip(result.scores.tolist(), result.pred_classes.tolist(), result.pred_boxes.tensor.tolist())
    )


def test_candidates_are_anchors_ranked_by_their_best_class():
    """With 2 candidates per level, detectron2 keeps the 2 best (anchor, class) pairs, both of
    anchor A; the official test keeps anchors A and B and every class of theirs above 0.05."""
    anchors = [[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50], [60, 60, 70, 70]]
    scores = [[0.9, 0.8], [0.7, 0.01], [0.6, 0.01], [0.01, 0.01]]
    outputs = {}
    for official in (False, True):
        model = tiny_model(official)
        model.test_topk_candidates = 2
        outputs[official] = detections(detect(model, anchors, scores))
    assert outputs[False] == [(0.8, 1, (0, 0, 10, 10)), (0.9, 0, (0, 0, 10, 10))]
    assert outputs[True] == [(0.7, 0, (20, 20, 30, 30)), (0.8, 1, (0, 0, 10, 10)), (0.9, 0, (0, 0, 10, 10))]


def test_boxes_are_clipped_before_nms():
    """Unclipped, the two boxes overlap with IoU 0.45 (< 0.5: both survive detectron2's NMS);
    clipped to the 100 x 100 image they coincide and the official test keeps one."""
    anchors = [[0, 0, 50, 50], [-60, 0, 50, 50]]
    scores = [[0.9, 0.0], [0.8, 0.0]]
    detectron2_order = detect(tiny_model(False), anchors, scores)
    official_order = detect(tiny_model(True), anchors, scores)
    assert detections(detectron2_order) == [(0.8, 0, (-60, 0, 50, 50)), (0.9, 0, (0, 0, 50, 50))]
    assert detections(official_order) == [(0.9, 0, (0, 0, 50, 50))]


def official_reference(model, anchors, scores, deltas, image_size, nms_pre, score_thr, nms_thr, max_per_img):
    """mmdetection 2.x ``AnchorHead._get_bboxes_single`` + ``multiclass_nms``, step by step."""
    height, width = image_size
    level_boxes, level_scores = [], []
    for level_anchors, level_score, level_delta in zip(anchors, scores, deltas):
        if level_score.shape[0] > nms_pre:
            top = level_score.max(dim=1).values.topk(nms_pre).indices
            level_anchors, level_score, level_delta = level_anchors[top], level_score[top], level_delta[top]
        boxes = model.box2box_transform.apply_deltas(level_delta, level_anchors.tensor)
        boxes[:, 0::2] = boxes[:, 0::2].clamp(min=0, max=width)
        boxes[:, 1::2] = boxes[:, 1::2].clamp(min=0, max=height)
        level_boxes.append(boxes)
        level_scores.append(level_score)
    boxes, scores = torch.cat(level_boxes), torch.cat(level_scores)
    anchor_index, classes = torch.nonzero(scores > score_thr, as_tuple=True)
    boxes, scores = boxes[anchor_index], scores[anchor_index, classes]
    keep = batched_nms(boxes, scores, classes, nms_thr)[:max_per_img]
    return boxes[keep], scores[keep], classes[keep]


@pytest.mark.parametrize("seed", range(3))
def test_official_order_equals_mmdetection_steps(seed):
    """Random predictions on five levels: a level larger than the candidate count, many
    classes above the threshold, boxes leaving the image and more detections than are kept."""
    torch.manual_seed(seed)
    model = tiny_model(True)
    model.test_topk_candidates = 30
    model.max_detections_per_image = 40
    features = [torch.zeros(1, 16, size, size) for size in (12, 6, 3, 2, 1)]
    anchors = model.anchor_generator(features)
    scores = [torch.rand(len(a), model.num_classes) ** 3 for a in anchors]
    deltas = [torch.randn(len(a), 4) for a in anchors]
    image_size = (90, 70)
    result = model.inference_single_image(anchors, scores, deltas, image_size)
    boxes, ref_scores, classes = official_reference(
        model,
        anchors,
        scores,
        deltas,
        image_size,
        30,
        model.test_score_thresh,
        model.test_nms_thresh,
        model.max_detections_per_image,
    )
    assert len(result) == len(ref_scores) == model.max_detections_per_image
    torch.testing.assert_close(result.scores, ref_scores, rtol=0, atol=0)
    torch.testing.assert_close(result.pred_classes, classes, rtol=0, atol=0)
    torch.testing.assert_close(result.pred_boxes.tensor, boxes, rtol=0, atol=0)


def test_switched_off_equals_detectron2_retinanet():
    """OFFICIAL_INFERENCE False: the same detections as detectron2's RetinaNet with the same
    weights, including the top-k selection (low threshold, few candidates), where the official
    order selects other detections."""
    cfg = tiny_retinanet_cfg(OFFICIAL_INFERENCE=False)
    cfg.MODEL.RETINANET.SCORE_THRESH_TEST = 0.0
    cfg.MODEL.RETINANET.TOPK_CANDIDATES_TEST = 40
    torch.manual_seed(0)
    alrp = build_model(cfg).eval()
    cfg.MODEL.META_ARCHITECTURE = "RetinaNet"
    retinanet = build_model(cfg).eval()
    assert type(retinanet) is RetinaNet
    incompatible = retinanet.load_state_dict(alrp.state_dict(), strict=False)
    assert not incompatible.missing_keys and incompatible.unexpected_keys == ["ranking_loss.loc_weight"]
    with torch.no_grad():
        ours, theirs = alrp(tiny_batch()), retinanet(tiny_batch())
        alrp.official_inference = True
        official = alrp(tiny_batch())
    assert not torch.equal(official[0]["instances"].scores, theirs[0]["instances"].scores)
    for a, b in zip(ours, theirs):
        a, b = a["instances"], b["instances"]
        assert len(a) > 0
        torch.testing.assert_close(a.pred_boxes.tensor, b.pred_boxes.tensor, rtol=0, atol=0)
        torch.testing.assert_close(a.scores, b.scores, rtol=0, atol=0)
        torch.testing.assert_close(a.pred_classes, b.pred_classes, rtol=0, atol=0)
