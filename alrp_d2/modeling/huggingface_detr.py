"""A Hugging Face DETR (RT-DETR, RT-DETR v2, Deformable-DETR one- or two-stage) as a detectron2 meta-architecture,
trained by a set-prediction ranking loss (:class:`alrp_d2.detr.SetRankingLoss`, attached by
:func:`alrp_d2.detr.attach_ranking_loss`), or by the model's own loss.

``transformers`` (the ``detr`` extra) is imported when a model is built, not when this module is: importing
``alrp_d2.modeling`` registers the meta-architecture without it. docs/detr.md, "detectron2 detectors"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from detectron2.config import configurable
from detectron2.modeling import META_ARCH_REGISTRY
from detectron2.modeling.postprocessing import detector_postprocess
from detectron2.utils.events import get_event_storage
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import Tensor, nn

from ..checks.errors import built_naming_config_keys, require_argument, require_config
from ..checks.hyperparameter_ranges import is_number
from ..detr import SetRankingLoss, set_ranking_loss
from .detr_detections import top_k_detections
from .detr_inputs import detr_batch, hf_labels
from .detr_pretrained import check_pretrained

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["MODEL_TYPES", "HuggingFaceDETR", "build_hf_detr"]

#: The ``model_type`` of the Hugging Face configs the meta-architecture takes; the last one takes a pixel mask.
MODEL_TYPES = ("rt_detr", "rt_detr_v2", "d_fine", "deformable_detr")
MASKED_MODEL_TYPES = ("deformable_detr",)
#: The padded sides of a model without a pixel mask are multiples of its backbone's largest stride: RT-DETR's and
#: D-FINE's hybrid encoder adds the stride-32 features, upsampled twice, to the stride-16 ones.
UNMASKED_STRIDE = 32
#: The config keys of the arguments, named in their errors when a yacs config builds the model.
CONFIG_KEYS = {
    "hf_config.model_type": "MODEL.DETR.HF_CONFIG.model_type",
    "hf_config.num_queries": "MODEL.DETR.HF_CONFIG.num_queries",
    "num_classes": "MODEL.DETR.NUM_CLASSES",
    "pretrained": "MODEL.DETR.PRETRAINED",
    "pixel_mean": "MODEL.PIXEL_MEAN",
    "pixel_std": "MODEL.PIXEL_STD",
    "input_format": "INPUT.FORMAT",
    "num_detections": "MODEL.DETR.NUM_DETECTIONS",
    "size_divisibility": "MODEL.DETR.SIZE_DIVISIBILITY",
}
OWNER = "HuggingFaceDETR"


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_arguments(
    num_classes: Any, pixel_mean: Any, pixel_std: Any, input_format: Any, num_detections: Any, loss: Any
) -> None:
    """The constructor's checks of the arguments that need no model, each an :class:`ArgumentError` naming it."""
    require_argument(
        _is_integer(num_classes) and num_classes >= 1, OWNER, "num_classes", num_classes, "must be an integer >= 1"
    )
    for name, values in (("pixel_mean", pixel_mean), ("pixel_std", pixel_std)):
        numbers = list(values) if isinstance(values, Iterable) and not isinstance(values, str) else []
        positive = name == "pixel_std"
        valid = len(numbers) == 3 and all(is_number(v) and (v > 0 or not positive) for v in numbers)
        expectation = "must be 3 finite numbers" + (" > 0 (the pixels are divided by them)" if positive else "")
        require_argument(valid, OWNER, name, values, expectation)
    require_argument(input_format in ("RGB", "BGR"), OWNER, "input_format", input_format, "must be 'RGB' or 'BGR'")
    valid_detections = _is_integer(num_detections) and num_detections >= 1
    require_argument(valid_detections, OWNER, "num_detections", num_detections, "must be an integer >= 1")
    valid_loss = loss is None or isinstance(loss, SetRankingLoss)
    require_argument(valid_loss, OWNER, "loss", loss, "must be a SetRankingLoss or None (the model's own loss)")


def check_size_divisibility(size_divisibility: Any, model_type: str) -> None:
    """The padded batch's sides: any multiple (0: none) with a pixel mask; a positive multiple of
    :data:`UNMASKED_STRIDE` without (RT-DETR, D-FINE: other sides fail inside the model's encoder)."""
    if model_type in MASKED_MODEL_TYPES:
        valid, expectation = _is_integer(size_divisibility) and size_divisibility >= 0, "must be an integer >= 0"
    else:
        valid = _is_integer(size_divisibility) and size_divisibility >= 1 and size_divisibility % UNMASKED_STRIDE == 0
        expectation = (
            f"must be a positive multiple of {UNMASKED_STRIDE} for {model_type} (its encoder adds the stride-"
            f"{UNMASKED_STRIDE} features, upsampled twice, to the stride-16 ones)"
        )
    require_argument(valid, OWNER, "size_divisibility", size_divisibility, expectation)


def plain(value: Any) -> Any:
    """A LazyConfig's or yacs' nested mapping / list as plain ``dict`` / ``list`` (what HF's configs serialise)."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def build_hf_detr(hf_config: Mapping[str, Any], pretrained: str, num_classes: int) -> PreTrainedModel:
    """The HF detector of ``hf_config`` (``model_type`` and the config's keywords, e.g. ``{"model_type":
    "rt_detr_v2", "d_model": 256, "backbone_config": {"model_type": "rt_detr_resnet", ...}}``) with ``num_classes``
    classes: randomly initialised, or with ``pretrained`` (a local folder written by ``save_pretrained`` or a hub id)
    the weights and config from there, ``hf_config``'s other keys overriding the config, the class heads
    re-initialised when the number of classes differs (HF's ``ignore_mismatched_sizes``)."""
    from transformers import AutoConfig, AutoModelForObjectDetection

    options = dict(plain(hf_config))
    model_type = options.pop("model_type", None)
    queries = options.get("num_queries", 1)
    require_argument(
        _is_integer(queries) and queries >= 1, OWNER, "hf_config.num_queries", queries, "must be an integer >= 1"
    )
    if pretrained:
        check_pretrained(pretrained, MODEL_TYPES)  # a folder that is missing, of another model, without safe weights
        model = AutoModelForObjectDetection.from_pretrained(
            pretrained, num_labels=num_classes, ignore_mismatched_sizes=True, **options
        )
        loaded = model.config.model_type
        expectation = f"the pretrained model {pretrained!r} is {loaded!r}"
        require_argument(model_type in (None, loaded), OWNER, "hf_config.model_type", model_type, expectation)
        require_argument(
            loaded in MODEL_TYPES, OWNER, "pretrained", pretrained, f"a {loaded!r} model; supported: {MODEL_TYPES}"
        )
        return model
    require_argument(
        model_type in MODEL_TYPES, OWNER, "hf_config.model_type", model_type, f"must be one of {MODEL_TYPES}"
    )
    return AutoModelForObjectDetection.from_config(AutoConfig.for_model(model_type, num_labels=num_classes, **options))


def weighted_hf_terms(
    model: PreTrainedModel, loss_dict: Dict[str, Tensor]
) -> Tuple[Dict[str, Tensor], Dict[str, Tensor]]:
    """The model's own ``loss_dict`` (its own loss, or the ranking loss with ``box_terms="model"``: its box terms and
    the ranking terms in place of its classification ones) as terms whose sum is ``outputs.loss``, and its metrics.
    A term is weighted as the model weights it: by its family's ``LossFamily.weights`` where HF's ``loss_dict`` is
    unweighted (Deformable, Conditional, DAB-DETR, DETR, YOLOS, LW-DETR, RF-DETR: ``loss_ce``, ``loss_bbox``,
    ``loss_giou`` and their suffixed layers), as it is where the dict is weighted already (RT-DETR, D-FINE, DEIMv2)
    and for the ranking terms (``loss_rank``, ``loss_corr``). A value not named ``loss_*`` (``cardinality_error``),
    which HF leaves out of ``outputs.loss``, is a metric."""
    from ..detr.hf_families import LOSS_FAMILIES

    family = LOSS_FAMILIES[model.loss_type]
    weights = {} if family.weights is None else family.weights(model.config)
    terms, metrics = {}, {}
    for key, value in loss_dict.items():
        if not key.startswith("loss_"):
            metrics[key] = value
            continue
        weight = next((w for name, w in weights.items() if key == name or key.startswith(name + "_")), 1.0)
        terms[key] = value * weight
    return terms, metrics


def log_metrics(metrics: Dict[str, Tensor]) -> None:
    """The model's metrics (``cardinality_error``) in detectron2's ``EventStorage`` of the step, read in one
    host synchronisation."""
    if metrics:
        values = torch.stack([value.detach().float() for value in metrics.values()]).tolist()
        get_event_storage().put_scalars(**dict(zip(metrics, values)))


@META_ARCH_REGISTRY.register()
class HuggingFaceDETR(nn.Module):
    """A Hugging Face DETR trained and evaluated the detectron2 way: detectron2's dataset dicts in (the images
    normalised and padded, the boxes as HF's labels: :mod:`.detr_inputs`), the loss terms out in training, and
    ``Instances`` in the original image's pixels at inference (the top ``num_detections`` (query, class) pairs by
    sigmoid score, :func:`~alrp_d2.modeling.detr_detections.top_k_detections`, scaled as detectron2's
    ``detector_postprocess``).

    The loss: ``loss``, a :class:`~alrp_d2.detr.SetRankingLoss` (a LazyConfig builds it as a node:
    ``model.loss = L(SetRankingLoss)(criterion=L(RankSortCriterion)(delta=0.5, loc_error_kind="giou"))``) on every
    set of the model's predictions; with ``loss`` None the HF model's own loss (RT-DETR's varifocal loss,
    Deformable-DETR's focal loss). With ``loss`` None or ``box_terms="model"``, the model's own terms weighted as HF
    weights them, its metrics logged (:func:`weighted_hf_terms`).

    The state dict holds the HF model's parameters and buffers under ``detr.``; the loss holds none.
    """

    pixel_mean: Tensor
    pixel_std: Tensor
    num_classes_key = "MODEL.DETR.NUM_CLASSES"  # the number of classes the dataset checks compare

    @built_naming_config_keys(CONFIG_KEYS)
    @configurable
    def __init__(
        self,
        *,
        hf_config: Mapping[str, Any],
        num_classes: int,
        pretrained: str = "",
        loss: Optional[SetRankingLoss] = None,
        pixel_mean: Sequence[float] = (0.0, 0.0, 0.0),
        pixel_std: Sequence[float] = (255.0, 255.0, 255.0),
        input_format: str = "RGB",
        num_detections: int = 300,
        size_divisibility: int = 32,
    ):
        """
        Args:
            hf_config: the HF config's ``model_type`` and keywords (:func:`build_hf_detr`).
            num_classes: the number of classes (HF's ``num_labels``).
            pretrained: "" (random init), or a folder of ``save_pretrained`` or a hub id to load from.
            loss: the set-prediction ranking loss; None: the HF model's own loss.
            pixel_mean, pixel_std: the normalisation of the 0-255 pixels, in ``input_format``'s channel order (HF's
                RT-DETR: mean 0, std 255; Deformable-DETR: ImageNet's mean and std).
            input_format: "RGB" or "BGR", the dataset mapper's ``image_format`` (the HF model takes RGB).
            num_detections: detections per image at inference (RT-DETR 300, Deformable-DETR 100).
            size_divisibility: the padded batch's sides are multiples of it (:func:`check_size_divisibility`).
        """
        super().__init__()
        check_arguments(num_classes, pixel_mean, pixel_std, input_format, num_detections, loss)
        self.detr = build_hf_detr(hf_config, pretrained, num_classes)
        check_size_divisibility(size_divisibility, self.detr.config.model_type)
        self.num_classes = num_classes
        self.loss = loss  # a submodule: it shows in the model's repr and modules()
        if loss is not None:
            from ..detr.hf_loss_function import attach_ranking_loss

            attach_ranking_loss(self.detr, loss)
        self.masked = self.detr.config.model_type in MASKED_MODEL_TYPES
        self.input_format = input_format
        self.num_detections = num_detections
        self.size_divisibility = size_divisibility
        self.register_buffer("pixel_mean", torch.tensor(list(pixel_mean)).view(-1, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(list(pixel_std)).view(-1, 1, 1), persistent=False)

    @classmethod
    def from_config(cls, cfg) -> Dict[str, Any]:
        detr = cfg.MODEL.DETR
        options = plain(detr.LOSS_OPTIONS)
        require_config(
            bool(detr.CRITERION) or not options,
            "MODEL.DETR.LOSS_OPTIONS",
            options,
            'must be empty with MODEL.DETR.CRITERION "" (the model\'s own loss)',
        )
        return {
            "hf_config": plain(detr.HF_CONFIG),
            "num_classes": detr.NUM_CLASSES,
            "pretrained": detr.PRETRAINED,
            "loss": set_ranking_loss(detr.CRITERION, options) if detr.CRITERION else None,
            "pixel_mean": cfg.MODEL.PIXEL_MEAN,
            "pixel_std": cfg.MODEL.PIXEL_STD,
            "input_format": cfg.INPUT.FORMAT,
            "num_detections": detr.NUM_DETECTIONS,
            "size_divisibility": detr.SIZE_DIVISIBILITY,
        }

    @property
    def device(self) -> torch.device:
        return self.pixel_mean.device

    def forward(self, batched_inputs: List[Dict[str, Any]]) -> Union[Dict[str, Tensor], List[Dict[str, Any]]]:
        """Training: the weighted loss terms (their sum is the HF model's ``outputs.loss``; its metrics logged,
        :func:`weighted_hf_terms`), in detectron2's ``EventStorage`` as detectron2's models train. Inference: per image
        ``{"instances": Instances}`` at its ``height`` x ``width`` (the input's size when not given)."""
        batch = detr_batch(
            batched_inputs,
            self.pixel_mean,
            self.pixel_std,
            self.input_format == "BGR",
            self.size_divisibility,
            self.masked,
        )
        pixel_mask = batch.pixel_mask if self.masked else None
        if self.training:
            labels = hf_labels([x["instances"] for x in batched_inputs], batch.scales)
            outputs = self.detr(pixel_values=batch.pixel_values, pixel_mask=pixel_mask, labels=labels)
            if self.loss is not None and self.loss.box_terms != "model":
                return outputs.loss_dict  # the ranking loss's terms, weighted
            terms, metrics = weighted_hf_terms(self.detr, outputs.loss_dict)
            log_metrics(metrics)
            return terms
        outputs = self.detr(pixel_values=batch.pixel_values, pixel_mask=pixel_mask)
        results = top_k_detections(
            outputs.logits, outputs.pred_boxes, batch.scales, batch.image_sizes, self.num_detections
        )
        return [
            {"instances": detector_postprocess(result, x.get("height", size[0]), x.get("width", size[1]))}
            for result, x, size in zip(results, batched_inputs, batch.image_sizes)
        ]
