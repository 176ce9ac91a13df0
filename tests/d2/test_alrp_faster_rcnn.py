"""aLRP Faster R-CNN (paper Sec. 5.4, App. G.4): training steps without sampling, the RPN
weight, two independent self-balance weights, zero-positive batches, inference."""

import pytest
import torch
from detectron2.modeling import build_model
from detectron2.modeling.matcher import Matcher
from detectron2.structures import Boxes, pairwise_iou
from detectron2.utils.events import EventStorage

from alrp_d2.criteria import AlrpCriterion
from alrp_d2.engine import find_ranking_losses
from alrp_d2.modeling import AlrpFastRCNNOutputLayers, AlrpROIHeads, AlrpRPN, HeadRankingLoss

from .tiny_configs import load_config, ranking_statistics, tiny_batch, tiny_faster_rcnn_cfg

NUM_CLASSES = 3
LOSS_NAMES = {"loss_rpn_cls", "loss_rpn_loc", "loss_box_cls", "loss_box_loc"}


def training_model(**alrp):
    torch.manual_seed(0)
    model = build_model(tiny_faster_rcnn_cfg(**alrp))
    model.train()
    return model


def train_losses(model, data=None):
    with EventStorage():
        losses = model(data or tiny_batch())
    return losses, ranking_statistics(model)


@pytest.mark.parametrize(
    "criterion,loc_error", [("AlrpCriterion", "giou"), ("AlrpCriterion", "iou"), ("APCriterion", "giou")]
)
def test_training_step(criterion, loc_error):
    model = training_model(CRITERION=criterion, LOC_ERROR=loc_error)
    assert isinstance(model.proposal_generator, AlrpRPN) and isinstance(model.roi_heads, AlrpROIHeads)
    losses, _ = train_losses(model)
    sum(losses.values()).backward()
    assert set(losses) == LOSS_NAMES
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    rpn_head, predictor = model.proposal_generator.rpn_head, model.roi_heads.box_predictor
    for layer in (rpn_head.objectness_logits, rpn_head.anchor_deltas, predictor.cls_score, predictor.bbox_pred):
        assert layer.weight.grad.abs().sum() > 0


def test_box_predictor_has_one_sigmoid_logit_per_class_and_class_specific_boxes():
    predictor = training_model().roi_heads.box_predictor
    assert isinstance(predictor, AlrpFastRCNNOutputLayers)
    assert predictor.cls_score.out_features == NUM_CLASSES
    assert predictor.bbox_pred.out_features == 4 * NUM_CLASSES


@pytest.fixture
def ranking_inputs(monkeypatch):
    """Records the (logits, ranking labels, loc_errors) that each head hands to its ranking loss,
    the labels rebuilt as 1 positive / 0 negative / -1 ignored per (row, class) pair."""
    calls, heads = {}, []
    forward, criterion = HeadRankingLoss.forward, AlrpCriterion.__call__

    def spy_forward(self, logits, rows, source):
        heads.append(self.name)
        return forward(self, logits, rows, source)

    def spy_criterion(self, sets, group):
        ((logits, targets, loc_errors),) = sets
        labels = torch.where(targets.valid, 0, -1).expand_as(logits).clone()
        labels.view(-1)[targets.flat_index(logits.shape[-1])] = 1
        calls[heads[-1]] = (logits.detach(), labels.flatten(), loc_errors.detach())
        return criterion(self, sets, group)

    monkeypatch.setattr(HeadRankingLoss, "forward", spy_forward)
    monkeypatch.setattr(AlrpCriterion, "__call__", spy_criterion)
    return calls


def test_rpn_ranks_every_labelled_anchor_of_every_image(ranking_inputs):
    cfg = tiny_faster_rcnn_cfg()
    cfg.MODEL.RPN.BATCH_SIZE_PER_IMAGE = 8  # detectron2 would sample 8 anchors per image
    torch.manual_seed(0)
    model = build_model(cfg)
    model.train()
    data = tiny_batch()
    train_losses(model, data)

    rpn = model.proposal_generator
    features = model.backbone(model.preprocess_image(data).tensor)
    anchors = Boxes.cat(rpn.anchor_generator([features[f] for f in rpn.in_features]))
    matcher = Matcher([0.3, 0.7], [0, -1, 1], allow_low_quality_matches=True)
    anchor_labels = torch.stack([matcher(pairwise_iou(x["instances"].gt_boxes, anchors))[1] for x in data])

    logits, labels, loc_errors = ranking_inputs["rpn"]
    assert logits.numel() == len(data) * len(anchors)
    assert torch.equal(labels, anchor_labels.flatten().to(labels.dtype))
    assert (labels >= 0).sum() > 2 * 8 and (labels == 0).sum() > 0
    assert loc_errors.numel() == (anchor_labels == 1).sum() > 0


def test_box_head_ranks_all_proposals_and_gt_boxes_times_classes(ranking_inputs):
    cfg = tiny_faster_rcnn_cfg()
    cfg.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE = 8  # detectron2 would sample 8 proposals per image
    cfg.MODEL.ROI_HEADS.PROPOSAL_APPEND_GT = True  # the paper config does not append them
    torch.manual_seed(0)
    model = build_model(cfg)
    model.train()
    rpn_outputs = []
    model.proposal_generator.register_forward_hook(lambda module, inputs, output: rpn_outputs.append(output[0]))
    data = tiny_batch()
    train_losses(model, data)

    boxes = [
        Boxes.cat([proposals.proposal_boxes, x["instances"].gt_boxes]) for proposals, x in zip(rpn_outputs[0], data)
    ]
    num_positives = sum(
        int((pairwise_iou(x["instances"].gt_boxes, b).max(dim=0).values >= 0.5).sum())
        for b, x in zip(boxes, data)
        if len(x["instances"])
    )
    logits, labels, loc_errors = ranking_inputs["box"]
    num_boxes = sum(len(b) for b in boxes)
    assert num_boxes > len(data) * 8
    assert logits.numel() == labels.numel() == num_boxes * NUM_CLASSES
    assert (labels >= 0).all()
    assert loc_errors.numel() == (labels == 1).sum() == num_positives >= 2


@pytest.mark.parametrize(
    "alrp,rpn_weight,loc_weight",
    [({}, 0.2, 50.0), ({"RPN_WEIGHT": 0.5, "SB_ENABLED": False, "LOC_WEIGHT": 5.0}, 0.5, 5.0)],
)
def test_rpn_weight_multiplies_both_rpn_components_only(alrp, rpn_weight, loc_weight):
    losses, logged = train_losses(training_model(**alrp))
    expected = {
        "loss_rpn_cls": rpn_weight * logged["rpn"]["cls"],
        "loss_rpn_loc": rpn_weight * loc_weight * logged["rpn"]["loc"],
        "loss_box_cls": logged["box"]["cls"],
        "loss_box_loc": loc_weight * logged["box"]["loc"],
    }
    for name, value in expected.items():
        assert losses[name].item() == pytest.approx(value, rel=1e-5), name


def test_rpn_and_box_head_have_independent_self_balance_weights():
    model = training_model()
    losses = find_ranking_losses(model)
    assert set(losses) == {"rpn", "box"}
    assert losses["rpn"] is not losses["box"]
    assert all(loss.self_balanced and loss.loc_weight.item() == 50.0 for loss in losses.values())

    before, _ = train_losses(model)
    losses["rpn"].set_loc_weight(10.0)
    after_rpn, _ = train_losses(model)
    losses["box"].set_loc_weight(2.0)
    after_box, _ = train_losses(model)

    assert after_rpn["loss_rpn_loc"].item() == pytest.approx(before["loss_rpn_loc"].item() / 5, rel=1e-5)
    assert after_box["loss_box_loc"].item() == pytest.approx(before["loss_box_loc"].item() / 25, rel=1e-5)
    for name in LOSS_NAMES - {"loss_rpn_loc"}:
        assert after_rpn[name].item() == pytest.approx(before[name].item(), rel=1e-5), name
    for name in LOSS_NAMES - {"loss_box_loc"}:
        assert after_box[name].item() == pytest.approx(after_rpn[name].item(), rel=1e-5), name


def test_batch_without_positives_gives_finite_zero_losses():
    model = training_model()
    losses, _ = train_losses(model, tiny_batch(with_objects=False))
    total = sum(losses.values())
    total.backward()
    assert set(losses) == LOSS_NAMES
    assert total.item() == 0 and all(torch.isfinite(v) for v in losses.values())
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_batch_without_proposals_gives_finite_zero_box_losses():
    cfg = tiny_faster_rcnn_cfg()
    cfg.MODEL.RPN.POST_NMS_TOPK_TRAIN = 0  # the RPN keeps no proposal
    torch.manual_seed(0)
    model = build_model(cfg).train()
    losses, logged = train_losses(model)
    sum(losses.values()).backward()
    assert losses["loss_box_cls"].item() == losses["loss_box_loc"].item() == 0
    assert losses["loss_rpn_cls"].item() > 0
    assert logged["box"] == {"cls": 0.0, "loc": 0.0, "ratio": None, "logit_min": 0.0, "logit_max": 0.0}
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_inference_returns_instances_with_sigmoid_scores():
    torch.manual_seed(0)
    model = build_model(tiny_faster_rcnn_cfg())
    model.eval()
    class_logits = []
    model.roi_heads.box_predictor.register_forward_hook(lambda module, inputs, output: class_logits.append(output[0]))
    with torch.no_grad():
        outputs = model([{"image": torch.rand(3, 96, 128) * 255, "height": 192, "width": 256}])
    result = outputs[0]["instances"]
    assert result.image_size == (192, 256)
    assert 0 < len(result) <= 100
    assert torch.all((result.scores >= 0.05) & (result.scores <= 1))
    assert torch.all((result.pred_classes >= 0) & (result.pred_classes < NUM_CLASSES))
    assert torch.isin(result.scores, class_logits[0].sigmoid()).all()


@pytest.mark.parametrize(
    "key,value",
    [
        ("MODEL.ALRP.RPN_WEIGHT", 0.0),
        ("MODEL.ALRP.RPN_TAU", 1.0),
        ("MODEL.ALRP.RPN_DELTA", 0.0),
        ("MODEL.ALRP.TAU", -0.1),
        ("MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG", True),
    ],
)
def test_bad_config_fails_at_build_time_naming_the_key(key, value):
    cfg = tiny_faster_rcnn_cfg()
    cfg.merge_from_list([key, value])
    with pytest.raises(ValueError, match=key):
        build_model(cfg)


def test_coco_config_builds_the_paper_model():
    cfg = load_config("alrp_faster_rcnn_R50_FPN_500.yaml")
    cfg.MODEL.DEVICE = "cpu"
    model = build_model(cfg)
    assert isinstance(model.proposal_generator, AlrpRPN) and isinstance(model.roi_heads, AlrpROIHeads)
    assert model.roi_heads.box_predictor.cls_score.out_features == 80
    assert model.proposal_generator.ranking_loss.loss_weight == 0.2
    assert model.proposal_generator.ranking_loss.criterion.tau == 0.7
    assert model.roi_heads.box_predictor.ranking_loss.criterion.tau == 0.5
    epoch = cfg.MODEL.ALRP.SB_PERIOD
    assert (cfg.SOLVER.MAX_ITER, *cfg.SOLVER.STEPS) == (100 * epoch, 75 * epoch, 95 * epoch)
