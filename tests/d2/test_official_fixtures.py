"""The reference tensors of the official code (tests/fixtures/official) hit the edge cases their README lists, and
are complete: the official state dicts they assemble convert for the project models (test_convert_official_checkpoint)
and their recorded losses follow from their recorded inputs."""

from __future__ import annotations

import math

import torch
from torchvision.ops import box_iou

from .official_fixtures import inputs, load_fixture, network


def areas(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def test_images_are_zero_padded():
    data = inputs()
    for image, (height, width) in zip(data["images"], data["train_metas"]["img_shape"].tolist()):
        assert image[:, height:].abs().sum() == 0 and image[:, :, width:].abs().sum() == 0
        assert image[:, :height, :width].abs().min() > 0
        assert height % 32 or width % 32  # the test pads each image to a multiple of 32
    assert data["images"].shape[-2:] == (64, 64)  # not a multiple of the stride 128


def test_iou_retinanet_edge_cases():
    fixture = network("retinanet_iou")
    anchors = torch.cat(fixture["network"]["anchors"])
    gt = inputs()["gt_bboxes"][0]
    assignment = fixture["variants"]["alrp"]["train"]["calls"]["assign"][0]["output"]
    # A ground truth at exactly IoU 0.5 with an anchor: positive.
    exact = torch.nonzero(box_iou(gt[:1], anchors)[0] == 0.5).flatten()
    assert len(exact) >= 1 and all(assignment["gt_inds"][exact] == 1)
    assert all(assignment["max_overlaps"][exact] == 0.5)
    # Two ground truths sharing their best anchors: the official rule gives them to the later one (index 2),
    # although box 1 has the higher IoU with them.
    ious = box_iou(gt[1:3], anchors)
    shared = torch.nonzero((ious[0] == ious[0].max()) & (ious[1] == ious[1].max())).flatten()
    assert len(shared) >= 1
    assert all(ious[0, shared] > ious[1, shared]) and all(assignment["gt_inds"][shared] == 3)


def test_rpn_edge_case_tied_low_quality_matches():
    """Image 1, boxes 3 and 4 (24 and 20 px, both above the RPN's min_pos_iou 0.3 with their best anchors): the
    same anchors are the best for both, box 3 having the higher IoU; the official rule gives them to box 4."""
    gt = inputs()["gt_bboxes"][1]
    for name in ("faster_rcnn_alrp", "faster_rcnn_ce"):
        fixture = network(name)
        anchors = torch.cat(fixture["network"]["anchors"])
        for variant in fixture["variants"].values():
            assignment = variant["train"]["calls"]["rpn_assign"][1]["output"]
            ious = box_iou(gt[3:5], anchors)
            shared = torch.nonzero((ious[0] == ious[0].max()) & (ious[1] == ious[1].max())).flatten()
            assert len(shared) >= 1 and ious[1].max() >= 0.3
            assert all(ious[0, shared] > ious[1, shared]) and all(assignment["gt_inds"][shared] == 5)


def test_foveabox_target_is_clamped_for_the_thin_object():
    fixture = network("foveabox")
    labels, targets = fixture["variants"]["alrp"]["train"]["calls"]["get_targets"][0]["output"]
    positive_targets = targets[labels < 80]
    assert (positive_targets == torch.tensor(1.0 / 16).log()).any()
    assert positive_targets.min() >= math.log(1.0 / 16) - 1e-6


def test_zero_area_proposals_and_detections_are_recorded():
    faster_rcnn = network("faster_rcnn_ce")
    assert all((areas(p[:, :4]) == 0).any() for p in faster_rcnn["network"]["proposals"])
    assert any((areas(p[:, :4]) == 0).any() for p in faster_rcnn["test"]["proposals"])
    foveabox = load_fixture("foveabox.pth.gz")
    assert any((areas(image["boxes"]) == 0).any() for image in foveabox["test"]["rescale_false"])


def test_recorded_alrp_localisation_loss_follows_from_recorded_errors():
    """L_loc = mean over positives of the cumulative E_loc in score order / rank, times the self-balance 50."""
    record = network("retinanet_iou")["variants"]["alrp"]["train"]
    loss, rank, order = record["calls"]["ranking_loss"][0]["output"]
    errors = record["calls"]["ranking_loss"][0]["regression_losses"]
    ordered = errors[order].flip(0)
    loc = (ordered.cumsum(0) / rank[order].flip(0)).mean() * 50
    assert torch.allclose(loc, record["losses"]["loss_bbox"], rtol=1e-6)
    assert loss == record["losses"]["loss_cls"]
