"""Hugging Face DETRs of the published small sizes built from their configs (random init, nothing downloaded), for
the benchmarks that time a training step: RT-DETR v2 R18 and D-FINE-S, each with 80 classes and 300 queries.

* ``rtdetr_v2_r18``: ``RTDetrV2Config`` with HF's ``rt_detr_resnet`` backbone of ResNet-18-vd size (depths
  [2, 2, 2, 2], hidden sizes [64, 128, 256, 512], basic blocks) and RT-DETR's R18 recipe (d_model 256, hidden
  expansion 0.5, 3 decoder layers);
* ``dfine_s``: ``DFineConfig`` with its HGNetV2-B0 backbone (``hgnet_v2``) and D-FINE-S's encoder and decoder
  (hidden expansion 0.5, depth multiplier 0.34, 3 decoder layers, decoder points [3, 6, 3]).

BatchNorm statistics are trained (``freeze_backbone_batch_norms=False``): from random init, frozen statistics would
let the activations explode.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import torch

NUM_CLASSES = 80
NUM_QUERIES = 300
#: What the two small recipes share: the encoder's hidden expansion, the decoder's depth, the queries and classes, and
#: BatchNorm statistics trained.
SMALL_RECIPE: Dict[str, Any] = {
    "hidden_expansion": 0.5,
    "decoder_layers": 3,
    "num_queries": NUM_QUERIES,
    "num_labels": NUM_CLASSES,
    "freeze_backbone_batch_norms": False,
}


def rtdetr_v2_r18() -> Any:
    from transformers import RTDetrResNetConfig, RTDetrV2Config, RTDetrV2ForObjectDetection

    backbone = RTDetrResNetConfig(
        depths=[2, 2, 2, 2],
        hidden_sizes=[64, 128, 256, 512],
        layer_type="basic",
        out_features=["stage2", "stage3", "stage4"],
    )
    config = RTDetrV2Config(backbone_config=backbone, encoder_in_channels=[128, 256, 512], **SMALL_RECIPE)
    return RTDetrV2ForObjectDetection(config)


def dfine_s() -> Any:
    from transformers import DFineConfig, DFineForObjectDetection, HGNetV2Config

    backbone = HGNetV2Config(
        stem_channels=[3, 16, 16],
        stage_in_channels=[16, 64, 256, 512],
        stage_mid_channels=[16, 32, 64, 128],
        stage_out_channels=[64, 256, 512, 1024],
        hidden_sizes=[64, 256, 512, 1024],
        stage_num_blocks=[1, 1, 2, 1],
        stage_numb_of_layers=[3, 3, 3, 3],
        use_learnable_affine_block=True,
        out_features=["stage2", "stage3", "stage4"],
    )
    config = DFineConfig(
        backbone_config=backbone,
        encoder_in_channels=[256, 512, 1024],
        depth_mult=0.34,
        decoder_n_points=[3, 6, 3],
        **SMALL_RECIPE,
    )
    return DFineForObjectDetection(config)


#: The models by name.
MODELS: Dict[str, Callable[[], Any]] = {"rtdetr_v2_r18": rtdetr_v2_r18, "dfine_s": dfine_s}


def ranking_and_own(name: str, device: str) -> List[torch.nn.Module]:
    """The model ``name`` trained by Rank & Sort Loss (delta 0.5, GIoU localisation error) with its own box terms
    (``use_ranking_loss(..., box_terms="model")``, docs/detr.md) and the same model, from the same random init, with
    its own loss."""
    from alrp_d2.criteria import RankSortCriterion
    from alrp_d2.detr import use_ranking_loss

    models = []
    for ranked in (True, False):
        torch.manual_seed(0)
        model = MODELS[name]().to(device).train()
        if ranked:
            use_ranking_loss(model, RankSortCriterion(delta=0.5, loc_error_kind="giou"), box_terms="model")
        models.append(model)
    return models


def hf_batch(images: List[Dict[str, Any]], size: int) -> Dict[str, Any]:
    """HF's ``pixel_values`` (scaled to [0, 1]) and ``labels`` (``class_labels``, normalised cx, cy, w, h boxes) of
    detectron2-style inputs (``image`` 0-255, ``instances`` with ``gt_boxes`` x0, y0, x1, y1, ``gt_classes``)."""
    pixels = torch.stack([image["image"] for image in images]) / 255.0
    labels = []
    for image in images:
        instances = image["instances"]
        x0, y0, x1, y1 = (instances.gt_boxes.tensor / size).unbind(1)
        boxes = torch.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], 1).to(pixels.device)
        labels.append({"class_labels": instances.gt_classes.to(pixels.device), "boxes": boxes})
    return {"pixel_values": pixels, "labels": labels}


def loss_call(name: str, labels: List[Dict[str, torch.Tensor]], size: int, device: str) -> Tuple[Any, Tuple, Dict]:
    """The model ``name`` (random init, training mode) and the arguments its forward hands its loss function on
    ``len(labels)`` random images of ``size`` x ``size`` px with ``labels``: its predictions (every floating-point
    tensor) as leaves that require grad, so that a loss function's forward and backward can be timed alone."""
    torch.manual_seed(0)
    model = MODELS[name]().to(device).train()
    own = model.loss_function
    captured: Dict[str, Any] = {}

    def record(*args: Any, **kwargs: Any) -> Any:
        captured.update(args=args, kwargs=kwargs)
        return own(*args, **kwargs)

    model.loss_function = record
    with torch.no_grad():
        model(pixel_values=torch.rand(len(labels), 3, size, size, device=device), labels=labels)
    model.loss_function = own

    def leaf(value: Any) -> Any:
        is_prediction = isinstance(value, torch.Tensor) and value.is_floating_point()
        return value.detach().clone().requires_grad_(True) if is_prediction else value

    arguments = tuple(leaf(value) for value in captured["args"])
    return model, arguments, {key: leaf(value) for key, value in captured["kwargs"].items()}
