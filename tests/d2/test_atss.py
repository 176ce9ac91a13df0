"""ATSS assignment on hand-made cases and against a per-GT loop transcription of ATSS Alg. 1."""

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.structures import Boxes, pairwise_iou

from alrp_d2.modeling import AtssMatcher

from .tiny_configs import instances, tiny_retinanet_cfg


def boxes(*rows):
    return Boxes(torch.tensor(rows, dtype=torch.float32).reshape(-1, 4))


def atss_loop(gt: Boxes, levels, topk):
    """ATSS Alg. 1 written per ground truth and per level."""
    anchors = Boxes.cat(levels)
    ious = pairwise_iou(gt, anchors)
    centers = anchors.get_centers()
    best = torch.full((len(anchors),), -1.0)
    matched = torch.zeros(len(anchors), dtype=torch.long)
    for g in range(len(gt)):
        gt_center = gt.get_centers()[g]
        candidates, start = [], 0
        for level in levels:
            dist = (centers[start : start + len(level)] - gt_center).norm(dim=1)
            order = sorted(range(len(level)), key=lambda i: (dist[i].item(), i))
            candidates += [start + i for i in order[: min(topk, len(level))]]
            start += len(level)
        cand_ious = ious[g, candidates]
        threshold = cand_ious.mean() + (cand_ious.std() if len(candidates) > 1 else 0.0)
        x1, y1, x2, y2 = gt.tensor[g].tolist()
        for a, iou in zip(candidates, cand_ious.tolist()):
            cx, cy = centers[a].tolist()
            inside = min(cx - x1, cy - y1, x2 - cx, y2 - cy) > 0.01
            if iou >= threshold and inside and iou > best[a]:
                best[a], matched[a] = iou, g
    return matched, (best > -1).to(torch.int8)


def test_no_ground_truth_gives_all_negative():
    matched, labels = AtssMatcher(9)(boxes(), [boxes([0, 0, 10, 10], [5, 5, 20, 20])])
    assert labels.tolist() == [0, 0] and matched.tolist() == [0, 0]


def test_iou_threshold_and_centre_rule():
    gt = boxes([0, 0, 10, 10])
    # IoU 1 (centre inside); IoU 0.143 with the centre on the border; IoU 0.
    level = boxes([0, 0, 10, 10], [5, 5, 15, 15], [20, 20, 30, 30])
    matched, labels = AtssMatcher(3)(gt, [level])
    assert labels.tolist() == [1, 0, 0]


def test_candidates_are_the_closest_per_level():
    gt = boxes([0, 0, 40, 40])
    # Level 1 (topk 2): tiny A at the centre, E (IoU 0.95) at distance 0.7, F (IoU 0.91) at
    # distance 1.4 is not a candidate. Level 2: two low-IoU anchors at the centre. The candidate
    # IoUs (0.01, 0.95, 0.0025, 0.0625) give a threshold of 0.72.
    level1 = boxes([18, 18, 22, 22], [0, 0, 41, 41], [1, 1, 41, 41])
    level2 = boxes([19, 19, 21, 21], [15, 15, 25, 25])
    matched, labels = AtssMatcher(2)(gt, [level1, level2])
    assert labels.tolist() == [0, 1, 0, 0, 0]


def test_anchor_positive_for_two_gts_takes_the_higher_iou():
    gt = boxes([0, 0, 10, 10], [0, 0, 12, 12])
    level = boxes([0, 0, 11, 11], [100, 100, 110, 110])
    matched, labels = AtssMatcher(1)(gt, [level])
    ious = pairwise_iou(gt, level)[:, 0]
    assert labels[0] == 1 and matched[0] == int(ious.argmax())


@pytest.mark.parametrize("seed", range(20))
def test_matches_loop_transcription(seed):
    gen = torch.Generator().manual_seed(seed)
    levels = []
    for stride in (8, 16, 32):
        xs = torch.arange(0, 128, stride, dtype=torch.float32) + stride / 2
        cy, cx = torch.meshgrid(xs, xs, indexing="ij")
        centers = torch.stack([cx.flatten(), cy.flatten()], 1)
        size = 4 * stride
        levels.append(Boxes(torch.cat([centers - size / 2, centers + size / 2], 1)))
    num_gt = int(torch.randint(1, 6, (1,), generator=gen))
    xy = torch.rand(num_gt, 2, generator=gen) * 100
    wh = torch.rand(num_gt, 2, generator=gen) * 60 + 4
    gt = Boxes(torch.cat([xy, xy + wh], 1))
    matched, labels = AtssMatcher(4)(gt, levels)
    ref_matched, ref_labels = atss_loop(gt, levels, 4)
    assert torch.equal(labels, ref_labels)
    assert torch.equal(matched[labels == 1], ref_matched[ref_labels == 1])


def grid_levels(size: int, scales_per_octave: int):
    """Anchors of a ``size`` x ``size`` image on strides 8-128, ``scales_per_octave`` co-centred
    square anchors per location (the ATSS configs have 2, whose centre distances tie exactly)."""
    levels = []
    for stride in (8, 16, 32, 64, 128):
        xs = torch.arange(0, size, stride, dtype=torch.float32) + stride / 2
        cy, cx = torch.meshgrid(xs, xs, indexing="ij")
        centers = torch.stack([cx.flatten(), cy.flatten()], 1)
        sizes = [4 * stride * 2 ** (i / scales_per_octave) for i in range(scales_per_octave)]
        per_size = [torch.cat([centers - s / 2, centers + s / 2], 1) for s in sizes]
        levels.append(Boxes(torch.stack(per_size, 1).reshape(-1, 4)))
    return levels


def per_image_label_anchors(matcher, anchors, gt_instances, num_classes):
    """The previous ``AlrpRetinaNet.label_anchors``: the matcher called image by image."""
    gt_labels, matched_gt_boxes = [], []
    for gt in gt_instances:
        matched_idxs, anchor_labels = matcher(gt.gt_boxes, anchors)
        if len(gt) > 0:
            gt_labels.append(torch.where(anchor_labels == 1, gt.gt_classes[matched_idxs], num_classes))
            matched_gt_boxes.append(gt.gt_boxes.tensor[matched_idxs])
        else:
            gt_labels.append(torch.full_like(matched_idxs, num_classes))
            matched_gt_boxes.append(torch.zeros(len(matched_idxs), 4))
    return gt_labels, matched_gt_boxes


@pytest.mark.parametrize("scales_per_octave", [1, 2])
@pytest.mark.parametrize("seed", range(4))
def test_label_anchors_of_a_batch_equal_the_per_image_labels(seed, scales_per_octave):
    """One batched matcher call labels a batch of images with 3, 0, 1 and up to 12 ground truths
    (some overlapping, so that anchors are positive for several) as matching each image alone."""
    model = build_model(tiny_retinanet_cfg(MATCHER="atss"))
    gen = torch.Generator().manual_seed(seed)
    size = 256
    levels = grid_levels(size, scales_per_octave)
    gt_instances = []
    for count in (3, 0, 1, int(torch.randint(2, 13, (1,), generator=gen))):
        xy = torch.rand(count, 2, generator=gen) * size * 0.7
        wh = torch.rand(count, 2, generator=gen) * size * 0.4 + 6
        classes = torch.randint(0, 3, (count,), generator=gen)
        gt_instances.append(instances(torch.cat([xy, xy + wh], 1).tolist(), classes.tolist(), (size, size)))
    gt_labels, matched_gt_boxes = model.label_anchors(levels, gt_instances)
    ref_labels, ref_boxes = per_image_label_anchors(model.anchor_matcher, levels, gt_instances, model.num_classes)
    assert len(gt_labels) == len(matched_gt_boxes) == 4
    for labels, boxes_, ref_label, ref_box, gt in zip(gt_labels, matched_gt_boxes, ref_labels, ref_boxes, gt_instances):
        assert torch.equal(labels, ref_label)
        assert torch.equal(boxes_, ref_box)
        if scales_per_octave == 1 and len(gt):
            # No distance ties: also equal to the loop transcription of ATSS.
            loop_matched, loop_labels = atss_loop(gt.gt_boxes, levels, model.anchor_matcher.topk)
            assert torch.equal(labels != model.num_classes, loop_labels == 1)
            assert torch.equal(labels[loop_labels == 1], gt.gt_classes[loop_matched[loop_labels == 1]])
    assert sum(int((labels != model.num_classes).sum()) for labels in gt_labels) > 0
    assert torch.all(gt_labels[1] == model.num_classes) and torch.all(matched_gt_boxes[1] == 0)
