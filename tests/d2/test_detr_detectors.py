"""HuggingFaceDETR in one process: the boxes it gives the HF model and takes back, its loss terms (the ranking loss,
or the model's own weighted as HF weights it), weights from a ``save_pretrained`` folder, its optimiser groups."""

from __future__ import annotations

import pytest
import torch
from detectron2.config import CfgNode, get_cfg
from detectron2.utils.events import EventStorage
from torch import nn

from alrp_d2.checks.errors import ArgumentError
from alrp_d2.config import add_alrp_config
from alrp_d2.detr import SetRankingLoss, set_prediction_criterion
from alrp_d2.engine.detr_optimizer import GradientClippedAdamW, detr_param_groups
from alrp_d2.modeling import HuggingFaceDETR
from alrp_d2.modeling.detr_detections import top_k_detections
from alrp_d2.modeling.detr_inputs import detr_batch, hf_labels
from alrp_d2.modeling.huggingface_detr import plain

from .tiny_detr_detectors import DEFORMABLE_DETR_TWO_STAGE, RT_DETR_V2, two_sizes

pytest.importorskip("transformers", reason="HuggingFaceDETR needs transformers: pip install -e '.[detr]'")

IMAGENET = {"pixel_mean": [123.675, 116.28, 103.53], "pixel_std": [58.395, 57.12, 57.375]}


@pytest.mark.parametrize("masked", [False, True])
def test_boxes_are_normalised_by_the_region_the_model_sees(masked):
    """Deformable-DETR (a pixel mask): by the image's own size; RT-DETR: by the padded batch (96 x 96)."""
    mean, std = torch.zeros(3, 1, 1), torch.full((3, 1, 1), 255.0)
    batch = detr_batch(two_sizes(), mean, std, bgr=False, size_divisibility=32, masked=masked)
    assert batch.pixel_values.shape == (2, 3, 96, 96) and batch.image_sizes == [(64, 96), (96, 64)]
    assert batch.pixel_mask[0, :64].all() and not batch.pixel_mask[0, 64:].any()
    assert batch.pixel_mask[1, :, :64].all() and not batch.pixel_mask[1, :, 64:].any()
    labels = hf_labels([x["instances"] for x in two_sizes()], batch.scales)
    height = 64.0 if masked else 96.0
    torch.testing.assert_close(labels[0]["boxes"][0], torch.tensor([24 / 96, 32 / height, 32 / 96, 32 / height]))
    assert labels[1]["boxes"].shape == (0, 4) and labels[0]["class_labels"].tolist() == [0, 2]


def test_the_top_scored_pairs_in_the_image_pixels():
    logits = torch.tensor([[[0.0, 3.0], [2.0, -1.0], [1.0, 4.0]]])  # (1, 3 queries, 2 classes)
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.4], [0.25, 0.25, 0.5, 0.5], [0.9, 0.9, 0.4, 0.4]]])
    scales = torch.tensor([[100.0, 50.0, 100.0, 50.0]])
    (result,) = top_k_detections(logits, boxes, scales, [(40, 100)], num_detections=3)
    assert result.pred_classes.tolist() == [1, 1, 0] and result.image_size == (40, 100)
    torch.testing.assert_close(result.scores, torch.tensor([4.0, 3.0, 2.0]).sigmoid())
    expected = torch.tensor([[70.0, 35.0, 100.0, 40.0], [40.0, 15.0, 60.0, 35.0], [0.0, 0.0, 50.0, 25.0]])
    torch.testing.assert_close(result.pred_boxes.tensor, expected)  # the first clipped to the 40 x 100 image


@pytest.mark.parametrize(
    "hf_config, extra", [(RT_DETR_V2, {}), (DEFORMABLE_DETR_TWO_STAGE, IMAGENET)], ids=["rt_detr_v2", "deformable"]
)
@pytest.mark.parametrize("ranked", [True, False], ids=["rank_sort", "own_loss"])
def test_training_terms_sum_to_the_models_loss_and_inference_gives_instances(hf_config, extra, ranked):
    torch.manual_seed(0)
    loss = SetRankingLoss(set_prediction_criterion("RankSortCriterion")) if ranked else None
    model = HuggingFaceDETR(hf_config=hf_config, num_classes=3, loss=loss, num_detections=20, **extra)
    inputs = two_sizes()
    torch.manual_seed(1)
    with EventStorage():
        terms = model(inputs)
    torch.manual_seed(1)
    batch = detr_batch(inputs, model.pixel_mean, model.pixel_std, False, 32, model.masked)
    outputs = model.detr(
        pixel_values=batch.pixel_values,
        pixel_mask=batch.pixel_mask if model.masked else None,
        labels=hf_labels([x["instances"] for x in inputs], batch.scales),
    )
    torch.testing.assert_close(sum(terms.values()), outputs.loss)
    assert ("loss_rank" in terms) == ranked and all(key.startswith("loss_") for key in terms)
    sum(terms.values()).backward()
    model.eval()
    with torch.no_grad():
        (result,) = model([{"image": inputs[0]["image"][:, :, :64], "height": 128, "width": 96}])
    assert result["instances"].image_size == (128, 96) and 0 < len(result["instances"]) <= 20
    assert result["instances"].pred_classes.max() < 3 and (result["instances"].pred_boxes.tensor[:, 2:] <= 128).all()


def test_weights_from_a_save_pretrained_folder(tmp_path):
    torch.manual_seed(0)
    saved = HuggingFaceDETR(hf_config=RT_DETR_V2, num_classes=3)
    saved.detr.save_pretrained(tmp_path)
    loaded = HuggingFaceDETR(hf_config={"model_type": "rt_detr_v2"}, pretrained=str(tmp_path), num_classes=3)
    assert loaded.state_dict().keys() == saved.state_dict().keys()
    for name, value in saved.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    other_classes = HuggingFaceDETR(hf_config={}, pretrained=str(tmp_path), num_classes=4)
    assert other_classes.detr.config.num_labels == 4 and other_classes.loss is None
    backbone = {k: v for k, v in saved.state_dict().items() if ".backbone." in k}
    assert backbone and all(torch.equal(v, other_classes.state_dict()[k]) for k, v in backbone.items())
    with pytest.raises(ArgumentError, match=r"hf_config.model_type=.deformable_detr.\): the pretrained model"):
        HuggingFaceDETR(hf_config={"model_type": "deformable_detr"}, pretrained=str(tmp_path), num_classes=3)


def test_a_config_without_a_supported_model_type_is_named():
    with pytest.raises(ArgumentError, match=r"hf_config.model_type=.detr.\): must be one of"):
        HuggingFaceDETR(hf_config={"model_type": "detr"}, num_classes=3)


def test_optimiser_groups_of_the_published_recipes():
    torch.manual_seed(0)
    model = HuggingFaceDETR(hf_config=RT_DETR_V2, num_classes=3)
    groups = detr_param_groups(model, base_lr=1e-4, weight_decay=1e-4)
    setting = {id(p): (group["lr"], group["weight_decay"]) for group in groups for p in group["params"]}
    assert len(setting) == sum(1 for p in model.parameters() if p.requires_grad)
    norms = (nn.BatchNorm2d, nn.LayerNorm)
    for name, module in model.named_modules():
        for parameter in module.parameters(recurse=False):
            lr = 1e-5 if ".backbone." in name else 1e-4
            decay = 0.0 if isinstance(module, norms + (nn.Embedding,)) else 1e-4
            assert setting[id(parameter)] == pytest.approx((lr, decay)), name
    assert any(isinstance(m, nn.Embedding) for m in model.modules())


def test_the_clipped_adamw_steps_with_the_clipped_gradient():
    parameter = nn.Parameter(torch.zeros(4))
    reference = nn.Parameter(torch.zeros(4))
    parameter.grad = torch.full((4,), 10.0)
    reference.grad = torch.full((4,), 10.0) * (0.1 / 20.0)  # norm 20 clipped to 0.1
    GradientClippedAdamW([parameter], max_norm=0.1, lr=0.1, weight_decay=0.0).step()
    torch.optim.AdamW([reference], lr=0.1, weight_decay=0.0).step()
    torch.testing.assert_close(parameter.detach(), reference.detach())
    assert parameter.grad.norm().item() == pytest.approx(0.1, rel=1e-5)


def test_the_yacs_keys_build_the_set_ranking_loss():
    """MODEL.DETR.LOSS_OPTIONS: SetRankingLoss's keywords to the loss, the others to the criterion CRITERION names
    (with the set-prediction arguments); options without a criterion are refused naming the key."""
    cfg = get_cfg()
    add_alrp_config(cfg)
    cfg.MODEL.DETR.HF_CONFIG = CfgNode(plain(RT_DETR_V2))
    cfg.MODEL.DETR.NUM_CLASSES = 3
    cfg.MODEL.DETR.CRITERION = "AlrpCriterion"
    cfg.MODEL.DETR.LOSS_OPTIONS = CfgNode({"box_terms": "own", "ranking": "global", "delta": 0.5})
    loss = HuggingFaceDETR(cfg).loss
    assert isinstance(loss, SetRankingLoss) and (loss.box_terms, loss.ranking) == ("own", "global")
    assert (loss.criterion.delta, loss.criterion.tau, loss.criterion.loc_error_kind) == (0.5, 0.0, "giou")
    cfg.MODEL.DETR.CRITERION = ""
    with pytest.raises(ValueError, match="MODEL.DETR.LOSS_OPTIONS"):
        HuggingFaceDETR(cfg)
