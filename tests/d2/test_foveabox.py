"""FoveaBox and aLRP FoveaBox: target assignment on constructed boxes, the box coding, training
steps, inference, the self-balance hook, configs."""

import math

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.structures import Boxes
from detectron2.utils.events import EventStorage
from fvcore.nn import smooth_l1_loss

from alrp_d2.engine import find_ranking_losses
from alrp_d2.modeling import AlrpFoveaBox, FoveaBox
from alrp_d2.modeling.foveabox import FoveaBoxTransform

from .tiny_configs import instances, load_config, make_tiny, ranking_statistics, tiny_batch

NUM_CLASSES = 3
CONFIGS = [
    "foveabox_focal_R50_500.yaml",
    "foveabox_ap_R50_500.yaml",
    "foveabox_alrp_R50_500.yaml",
    "quickstart/alrp_foveabox_shapes.yaml",
]


def tiny_foveabox_cfg(config: str = "foveabox_alrp_R50_500.yaml", **alrp):
    cfg = make_tiny(load_config(config), NUM_CLASSES)
    cfg.MODEL.FOVEABOX.NUM_CONVS = 1
    cfg.MODEL.FOVEABOX.NUM_CLASSES = NUM_CLASSES
    for key, value in alrp.items():
        setattr(cfg.MODEL.ALRP, key, value)
    return cfg


BASE_EDGES = [16, 32, 64, 128, 256]


def label(model: FoveaBox, anchors, gt_instances):
    """``model.label_anchors`` stacked over the images: (N, R) labels, (N, R, 4) boxes."""
    labels, matched = model.label_anchors(anchors, gt_instances)
    return torch.stack(labels), torch.stack(matched)


@pytest.fixture(scope="module")
def foveabox() -> FoveaBox:
    torch.manual_seed(0)
    return build_model(tiny_foveabox_cfg("foveabox_focal_R50_500.yaml")).eval()


def level_anchors(model: FoveaBox, size: int):
    """The anchors of a size x size input (P3-P7 of strides 8-128)."""
    features = [torch.zeros(1, 1, math.ceil(size / s), math.ceil(size / s)) for s in model.anchor_matcher.strides]
    return model.anchor_generator(features)


def positives_by_level(model: FoveaBox, size: int, boxes, classes=None):
    """{level: sorted (row, column) of the positives} for one image, and the labels and boxes."""
    anchors = level_anchors(model, size)
    classes = classes if classes is not None else [0] * len(boxes)
    labels, matched = label(model, anchors, [instances(boxes, classes, (size, size))])
    result, start = {}, 0
    for level, (anchors_l, stride) in enumerate(zip(anchors, model.anchor_matcher.strides)):
        width = math.ceil(size / stride)
        index = (labels[0][start : start + len(anchors_l)] != NUM_CLASSES).nonzero().flatten().tolist()
        if index:
            result[level] = sorted((i // width, i % width) for i in index)
        start += len(anchors_l)
    return result, labels[0], matched[0], anchors


def reference_assignment(model: FoveaBox, size: int, boxes, classes):
    """mmdetection's FoveaHead._get_target_single transcribed with its loops: (R,) labels, (R, 4) targets."""
    boxes = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    classes = torch.tensor(classes)
    scales = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).sqrt()
    labels, targets = [], []
    for stride, edge, (low, high) in zip(model.anchor_matcher.strides, BASE_EDGES, model.anchor_matcher.scale_ranges):
        h = w = math.ceil(size / stride)
        y, x = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
        level_labels = torch.full((h, w), NUM_CLASSES)
        level_targets = torch.ones(h, w, 4)
        hit = ((scales >= low) & (scales <= high)).nonzero().flatten()
        hit = hit[torch.sort(-scales[hit], stable=True).indices]
        for index in hit.tolist():
            x1, y1, x2, y2 = (boxes[index] / stride).tolist()
            half_w, half_h = 0.5 * (x2 - x1), 0.5 * (y2 - y1)
            left = min(max(math.ceil(x1 + (1 - model.anchor_matcher.sigma) * half_w - 0.5), 0), w - 1)
            right = min(max(math.floor(x1 + (1 + model.anchor_matcher.sigma) * half_w - 0.5), 0), w - 1)
            top = min(max(math.ceil(y1 + (1 - model.anchor_matcher.sigma) * half_h - 0.5), 0), h - 1)
            down = min(max(math.floor(y1 + (1 + model.anchor_matcher.sigma) * half_h - 0.5), 0), h - 1)
            gx1, gy1, gx2, gy2 = boxes[index].tolist()
            cells = (slice(top, down + 1), slice(left, right + 1))
            level_labels[cells] = int(classes[index])
            level_targets[cells + (0,)] = (stride * x[cells] - gx1) / edge
            level_targets[cells + (1,)] = (stride * y[cells] - gy1) / edge
            level_targets[cells + (2,)] = (gx2 - stride * x[cells]) / edge
            level_targets[cells + (3,)] = (gy2 - stride * y[cells]) / edge
        labels.append(level_labels.flatten())
        targets.append(level_targets.clamp(1 / 16, 16).log().reshape(-1, 4))
    return torch.cat(labels), torch.cat(targets)


def test_fovea_cells_and_levels(foveabox):
    # sqrt(area) 40: P3 (1-64) and P4 (32-128). The fovea is the centre +- 0.4 * 20 = [44, 60] px.
    result, labels, matched, _ = positives_by_level(foveabox, 128, [[32, 32, 72, 72]], [2])
    assert result == {0: [(r, c) for r in (5, 6, 7) for c in (5, 6, 7)], 1: [(3, 3)]}
    assert set(labels.tolist()) == {2, NUM_CLASSES}
    assert torch.equal(matched[labels == 2], torch.tensor([[32.0, 32, 72, 72]]).expand(10, 4))


@pytest.mark.parametrize(
    "side,levels",
    [
        (31.5, {0}),
        (32, {0, 1}),
        (63.5, {0, 1}),
        (64, {0, 1, 2}),
        (64.5, {1, 2}),
        (128, {1, 2, 3}),
        (256, {2, 3, 4}),
        (512, {3, 4}),
        (600, {4}),
    ],
)
def test_scale_range_boundaries_are_inclusive(foveabox, side, levels):
    # Ranges (1, 64), (32, 128), (64, 256), (128, 512), (256, 2048), bounds included.
    # Centred at 536 px: every level has a cell centre within 0.4 * side / 2 of it.
    lo = 536 - side / 2
    result, *_ = positives_by_level(foveabox, 1024, [[lo, lo, lo + side, lo + side]])
    assert set(result) == levels


def test_tiny_and_huge_boxes(foveabox):
    # sqrt(area) < 1 or > 2048: no level; a 4 px box inside the image has an empty fovea on P3.
    assert positives_by_level(foveabox, 128, [[60, 60, 60.5, 61]])[0] == {}
    assert positives_by_level(foveabox, 128, [[60, 60, 64, 64]])[0] == {}
    assert positives_by_level(foveabox, 2304, [[0, 0, 2100, 2100]])[0] == {}
    # mmdet clamps the fovea to the map before testing it: a 4 px box at the corner keeps cell (0, 0).
    assert positives_by_level(foveabox, 128, [[0, 0, 4, 4]])[0] == {0: [(0, 0)]}
    # sqrt(area) 1024 (P7 only, stride 128, base edge 256): columns and rows 2..5.
    result, labels, matched, anchors = positives_by_level(foveabox, 1024, [[0, 0, 1024, 1024]])
    assert result == {4: [(r, c) for r in range(2, 6) for c in range(2, 6)]}
    first = (labels != NUM_CLASSES).nonzero()[0, 0]
    deltas = foveabox.box2box_transform.get_deltas(Boxes.cat(anchors).tensor[first][None], matched[first][None])
    # Cell (2, 2) is centred at 320 px: distances 320, 320, 704, 704 over the base edge 256.
    expected = torch.tensor([[320.0, 320.0, 704.0, 704.0]]) / 256
    assert torch.allclose(deltas, expected.log())


@pytest.mark.parametrize("small_first", [False, True])
def test_smallest_object_wins_overlapping_cells(foveabox, small_first):
    # Big (sqrt area 96): P4 and P5; small (40): P3 and P4, where both foveae are columns/rows 3-4.
    big, small = [16, 16, 112, 112], [44, 44, 84, 84]
    boxes, classes = ([small, big], [1, 0]) if small_first else ([big, small], [0, 1])
    result, labels, _, anchors = positives_by_level(foveabox, 128, boxes, classes)
    cells = [(r, c) for r in (3, 4) for c in (3, 4)]
    assert result == {
        0: [(r, c) for r in (7, 8) for c in (7, 8)],
        1: cells,
        2: [(r, c) for r in (1, 2) for c in (1, 2)],
    }
    p3, p4, p5 = labels[:256], labels[256:320], labels[320:336]
    assert set(p3[p3 != NUM_CLASSES].tolist()) == {1}
    assert set(p4[p4 != NUM_CLASSES].tolist()) == {1}
    assert set(p5[p5 != NUM_CLASSES].tolist()) == {0}


def test_assignment_matches_mmdetection_loops(foveabox):
    gen = torch.Generator().manual_seed(1)
    size = 320
    for _ in range(5):
        xy = torch.rand(12, 2, generator=gen) * size * 0.8
        wh = torch.rand(12, 2, generator=gen) ** 2 * size * 0.6 + 0.5
        boxes = torch.cat([xy, (xy + wh).clamp(max=size)], 1).tolist()
        classes = torch.randint(0, NUM_CLASSES, (12,), generator=gen).tolist()
        _, labels, matched, anchors = positives_by_level(foveabox, size, boxes, classes)
        ref_labels, ref_targets = reference_assignment(foveabox, size, boxes, classes)
        assert torch.equal(labels, ref_labels)
        positive = labels != NUM_CLASSES
        assert positive.any()
        deltas = foveabox.box2box_transform.get_deltas(Boxes.cat(anchors).tensor[positive], matched[positive])
        assert torch.allclose(deltas, ref_targets[positive], atol=1e-5)


def test_images_without_boxes(foveabox):
    anchors = level_anchors(foveabox, 128)
    empty = instances([], [], (128, 128))
    labels, matched = label(foveabox, anchors, [empty, empty])
    assert labels.shape == (2, sum(len(a) for a in anchors))
    assert (labels == NUM_CLASSES).all() and (matched == 0).all()  # no ground truth: zero boxes
    labels, _ = label(foveabox, anchors, [instances([[32, 32, 72, 72]], [1], (128, 128)), empty])
    assert (labels[0] == 1).sum() == 10 and (labels[1] == NUM_CLASSES).all()


def test_decode_inverts_encode():
    transform = FoveaBoxTransform()
    anchors = torch.tensor([[0.0, 0.0, 16.0, 16.0], [100.0, 40.0, 164.0, 104.0]])
    boxes = torch.tensor([[2.0, 3.0, 30.0, 12.0], [90.0, 50.0, 300.0, 80.0]])
    assert torch.allclose(transform.apply_deltas(transform.get_deltas(anchors, boxes), anchors), boxes, atol=1e-4)
    # Targets are clamped to [1/16, 16] base edges, predictions are not (up to exp(SCALE_CLAMP)).
    far = torch.tensor([[-400.0, 7.0, 9.0, 9.0]])
    assert transform.get_deltas(anchors[:1], far)[0, 0] == pytest.approx(math.log(16))


def test_inference_decodes_what_assignment_encodes(foveabox):
    boxes, classes = [[10.0, 12.0, 50.0, 60.0], [60.0, 20.0, 120.0, 90.0]], [0, 2]
    anchors = level_anchors(foveabox, 128)
    labels, matched = label(foveabox, anchors, [instances(boxes, classes, (128, 128))])
    positive = labels[0] != NUM_CLASSES
    scores = torch.zeros(len(positive), NUM_CLASSES)
    scores[positive, labels[0][positive]] = 0.9
    deltas = torch.zeros(len(positive), 4)
    deltas[positive] = foveabox.box2box_transform.get_deltas(Boxes.cat(anchors).tensor[positive], matched[0][positive])
    split = [len(a) for a in anchors]
    result = foveabox.inference_single_image(anchors, scores.split(split), deltas.split(split), (128, 128))
    assert sorted(result.pred_classes.tolist()) == classes
    order = result.pred_classes.argsort()
    assert torch.allclose(result.pred_boxes.tensor[order], torch.tensor(boxes), atol=1e-3)


@pytest.mark.parametrize(
    "config,alrp,names",
    [
        ("foveabox_focal_R50_500.yaml", {}, {"loss_cls", "loss_box_reg"}),
        ("foveabox_alrp_R50_500.yaml", {}, {"loss_fovea_cls", "loss_fovea_loc"}),
        ("foveabox_ap_R50_500.yaml", {}, {"loss_fovea_cls", "loss_fovea_loc"}),
        ("foveabox_alrp_R50_500.yaml", {"CRITERION": "APCriterion"}, {"loss_fovea_cls", "loss_fovea_loc"}),
    ],
)
@pytest.mark.parametrize("with_objects", [True, False])
def test_training_step(config, alrp, names, with_objects):
    torch.manual_seed(0)
    cfg = tiny_foveabox_cfg(config, **alrp)
    if alrp:
        cfg.MODEL.ALRP.AP_LOC_LOSS = "giou"
    model = build_model(cfg).train()
    with EventStorage():
        losses = model(tiny_batch(with_objects))
        sum(losses.values()).backward()
    assert set(losses) == names
    assert all(torch.isfinite(v) for v in losses.values())
    grads = [model.head.cls_score.weight.grad, model.head.bbox_pred.weight.grad]
    if with_objects:
        assert all(v > 0 for v in losses.values())
        assert all(g is not None and g.abs().sum() > 0 for g in grads)
    else:
        # Nothing to localise; only the focal loss has negatives to push down without positives.
        assert all(g is None or torch.isfinite(g).all() for g in grads)


def test_alrp_loss_is_one_ranking_with_giou_errors():
    torch.manual_seed(0)
    model = build_model(tiny_foveabox_cfg()).train()
    assert isinstance(model, AlrpFoveaBox)
    with EventStorage():
        losses = model(tiny_batch())
    # Random init: nearly every negative outranks the positives, L_cls close to 1; L_loc carries
    # the initial self-balance weight 50.
    assert 0.9 < losses["loss_fovea_cls"].item() <= 1.0
    assert losses["loss_fovea_loc"].item() == pytest.approx(50 * ranking_statistics(model)["fovea"]["loc"], rel=1e-5)


def test_ap_loss_row_uses_smooth_l1_mean_over_coordinates():
    torch.manual_seed(0)
    model = build_model(tiny_foveabox_cfg("foveabox_ap_R50_500.yaml")).train()
    torch.nn.init.zeros_(model.head.bbox_pred.weight)
    torch.nn.init.zeros_(model.head.bbox_pred.bias)
    batch = tiny_batch()
    with EventStorage():
        model(batch)
    logged = ranking_statistics(model)["fovea"]["loc"]
    features = model.backbone(model.preprocess_image(batch).tensor)
    anchors = model.anchor_generator([features[f] for f in model.head_in_features])
    labels, boxes = label(model, anchors, [x["instances"] for x in batch])
    positive = labels != NUM_CLASSES
    targets = model.box2box_transform.get_deltas(Boxes.cat(anchors).tensor[positive.nonzero()[:, 1]], boxes[positive])
    expected = smooth_l1_loss(torch.zeros_like(targets), targets, 0.11).mean()
    assert logged == pytest.approx(expected.item(), rel=1e-5)


def test_self_balance_hook_sees_the_head():
    losses = find_ranking_losses(build_model(tiny_foveabox_cfg()))
    assert (
        list(losses) == ["fovea"]
        and losses["fovea"].self_balanced
        and type(losses["fovea"].criterion).__name__ == "AlrpCriterion"
    )
    losses = find_ranking_losses(build_model(tiny_foveabox_cfg("foveabox_ap_R50_500.yaml")))
    assert list(losses) == ["fovea"] and not losses["fovea"].self_balanced
    assert type(losses["fovea"].criterion).__name__ == "InterpolatedAPCriterion"
    assert find_ranking_losses(build_model(tiny_foveabox_cfg("foveabox_focal_R50_500.yaml"))) == {}


def test_invalid_settings_are_named():
    cfg = tiny_foveabox_cfg()
    cfg.MODEL.FOVEABOX.BASE_EDGES = [16, 32]
    with pytest.raises(ValueError, match="MODEL.FOVEABOX.BASE_EDGES"):
        build_model(cfg)
    cfg = tiny_foveabox_cfg(CRITERION="APCriterion")
    cfg.MODEL.ALRP.AP_LOC_LOSS = "l2"
    with pytest.raises(ValueError, match="MODEL.ALRP.AP_LOC_LOSS"):
        build_model(cfg)


@pytest.mark.parametrize("config", CONFIGS)
def test_config_builds(config):
    cfg = load_config(config)
    expected = {"foveabox_focal_R50_500.yaml": 0.02, "foveabox_ap_R50_500.yaml": 0.002}.get(config, None)
    if expected is not None:
        assert cfg.SOLVER.BASE_LR == expected
    if not config.startswith("quickstart"):
        assert cfg.SOLVER.STEPS == (75 * 3665, 95 * 3665) and cfg.SOLVER.MAX_ITER == 100 * 3665
    cfg = make_tiny(cfg, NUM_CLASSES)
    cfg.MODEL.FPN.OUT_CHANNELS = 64  # GroupNorm heads: 32 groups of two channels (P7 is 1 x 1)
    model = build_model(cfg)
    assert isinstance(model, FoveaBox)
    model.eval()
    with torch.no_grad():
        (output,) = model([{"image": torch.rand(3, 96, 128) * 255}])
    assert output["instances"].image_size == (96, 128)
