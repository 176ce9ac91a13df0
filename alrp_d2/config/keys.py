"""The config keys of alrp-d2: ``add_alrp_config`` adds them to a detectron2 config, as detectron2 projects do
(docs/configuration.md lists them)."""

from __future__ import annotations

from detectron2.config import CfgNode as CN

from .. import data, modeling  # noqa: F401  (registers the project's detectron2 components and shapes datasets)

__all__ = ["RENAMED_KEYS", "TEST_RESIZES", "TRAIN_FILTERS", "add_alrp_config"]

# Test-time resize: detectron2's ResizeShortestEdge (PIL) or mmcv's imrescale (cv2, its rounding).
TEST_RESIZES = ("detectron2", "mmcv")
# Training-set filter: detectron2's (DATALOADER.FILTER_EMPTY_ANNOTATIONS) or mmdetection's CocoDataset.
TRAIN_FILTERS = ("detectron2", "mmdet")
# Keys that moved: (old key, new key, note).
RENAMED_KEYS = (
    (
        "MODEL.ALRP.CLS_LOSS",
        "MODEL.ALRP.CRITERION",
        "its values are registered criterion class names: alrp -> AlrpCriterion, ap -> APCriterion, "
        "ap_interpolated -> InterpolatedAPCriterion, rank_sort -> RankSortCriterion",
    ),
    ("MODEL.FOVEABOX.AP_LOC_LOSS", "MODEL.ALRP.AP_LOC_LOSS", "one key for the localisation loss of every AP head"),
)


def add_alrp_config(cfg: CN) -> None:
    """Adds the aLRP keys to a detectron2 config (in place), as detectron2 projects do."""
    cfg.MODEL.ALRP = CN()
    _add_loss_keys(cfg.MODEL.ALRP)
    _add_self_balance_keys(cfg.MODEL.ALRP)
    _add_retinanet_keys(cfg.MODEL.ALRP)
    _add_faster_rcnn_keys(cfg.MODEL.ALRP)
    _add_network_keys(cfg)
    _add_rank_sort_keys(cfg.MODEL.ALRP)
    for old, new, note in RENAMED_KEYS:
        cfg.register_renamed_key(old, new, note)
    _add_dense_detector_keys(cfg)
    _add_detr_keys(cfg)
    _add_ssd_keys(cfg)
    _add_robustness_keys(cfg)


def _add_dense_detector_keys(cfg: CN) -> None:
    """MODEL.FOVEABOX and MODEL.FCOS: the dense detectors that detectron2 lacks or builds from a LazyConfig only."""
    # FoveaBox (Kong et al., IEEE TIP 2020) as mmdetection's FoveaHead (paper Sec. 5.4, App. G); its own
    # loss (mmdet's config) is focal loss (alpha 0.4, gamma 1.5) + Smooth L1 on the encoded distances.
    cfg.MODEL.FOVEABOX = _dense_head_config(norm="", focal_alpha=0.4, focal_gamma=1.5, score_thresh=0.05, nms=0.5)
    # Per level: the edge normalising the encoded distances, the range of sqrt(w * h) it learns.
    cfg.MODEL.FOVEABOX.BASE_EDGES = [16, 32, 64, 128, 256]
    cfg.MODEL.FOVEABOX.SCALE_RANGES = [[1, 64], [32, 128], [64, 256], [128, 512], [256, 2048]]
    # Positives: cells whose centre is in the central SIGMA fraction of the box (the fovea).
    cfg.MODEL.FOVEABOX.SIGMA = 0.4
    cfg.MODEL.FOVEABOX.SMOOTH_L1_BETA = 0.11
    # aLRP FoveaBox's E_loc target (alrp_d2.modeling.alrp_foveabox.FOVEABOX_LOC_TARGETS): "gt_box" or, as the
    # official head, "decoded_target", the box decoded from the target distances clamped to [1/16, 16] base edges.
    cfg.MODEL.FOVEABOX.ALRP_LOC_TARGET = "gt_box"
    # Decoded distances exp(delta) clamped at 1000/16 base edges (detectron2's Box2BoxTransform); False: unclamped
    # (the official head, in training and test).
    cfg.MODEL.FOVEABOX.CLAMP_PREDICTED_DISTANCES = True
    # Test boxes clipped to [0, W - 1] x [0, H - 1] (the official head) instead of [0, W] x [0, H].
    cfg.MODEL.FOVEABOX.CLIP_TO_LAST_PIXEL = False
    # detectron2's FCOS built from this config (ConfigurableFCOS, AlrpFCOS); defaults of its LazyConfig.
    cfg.MODEL.FCOS = _dense_head_config(norm="GN", focal_alpha=0.25, focal_gamma=2.0, score_thresh=0.2, nms=0.6)
    cfg.MODEL.FCOS.CENTER_SAMPLING_RADIUS = 1.5
    # Centre-ness branch: "bce" (trained with BCE, sqrt(score * centre-ness) at test time, as FCOS)
    # or "none" (no branch; AlrpFCOS only, where aLRP Loss makes scores reflect localisation).
    cfg.MODEL.FCOS.CENTERNESS = "bce"


def _add_ssd_keys(cfg: CN) -> None:
    """INPUT.SSD: the training augmentation of the paper."""
    # SSD-style training augmentation (Liu et al., ECCV 2016), as used by the paper.
    cfg.INPUT.SSD = CN()
    cfg.INPUT.SSD.ENABLED = False
    cfg.INPUT.SSD.SIZE = 512
    cfg.INPUT.SSD.BRIGHTNESS_DELTA = 32
    cfg.INPUT.SSD.CONTRAST_RANGE = (0.5, 1.5)
    cfg.INPUT.SSD.SATURATION_RANGE = (0.5, 1.5)
    cfg.INPUT.SSD.HUE_DELTA = 18
    cfg.INPUT.SSD.EXPAND_PROB = 0.5
    cfg.INPUT.SSD.EXPAND_RATIO_RANGE = (1.0, 4.0)
    # Min-IoU crop modes, drawn uniformly (mmdet's sample_mode): 1 = no crop, 0 = any crop keeping a box centre.
    cfg.INPUT.SSD.MIN_IOUS = (1.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.0)
    cfg.INPUT.SSD.MIN_CROP_SIZE = 0.3


def _add_robustness_keys(cfg: CN) -> None:
    """Keys of the robustness of training runs."""
    # Robustness of training runs (docs/getting_started.md, "Resume", "Bad images", "Your own dataset").
    # Loading weights whose shapes differ from the model's (another dataset's class head) is an
    # error unless True (fine-tuning: those parameters keep their initialisation).
    cfg.MODEL.ALLOW_PARTIAL_WEIGHTS = False
    # True: a training image that cannot be read is skipped (one warning per file, a running
    # count); False: the first one stops training with an error naming the file.
    cfg.DATALOADER.SKIP_UNREADABLE_IMAGES = False
    # metrics.json gets a record every LOG_PERIOD iterations, smoothed over the last LOG_PERIOD
    # (detectron2's fixed 20): a resumed run logs the same values when CHECKPOINT_PERIOD is a multiple.
    cfg.SOLVER.LOG_PERIOD = 20


def _add_detr_keys(cfg: CN) -> None:
    """The Hugging Face DETR of ``HuggingFaceDETR`` (docs/detr.md, "detectron2 detectors")."""
    detr = cfg.MODEL.DETR = CN()
    # The HF config: model_type ("rt_detr", "rt_detr_v2", "deformable_detr") and its keywords.
    detr.HF_CONFIG = CN(new_allowed=True)
    detr.PRETRAINED = ""  # a save_pretrained folder or a hub id; "": random init
    detr.NUM_CLASSES = 80
    detr.CRITERION = "RankSortCriterion"  # "": the HF model's own loss
    detr.LOSS_OPTIONS = CN(new_allowed=True)  # SetRankingLoss keywords
    detr.NUM_DETECTIONS = 300
    detr.SIZE_DIVISIBILITY = 32


def _add_loss_keys(alrp: CN) -> None:
    """MODEL.ALRP keys of the ranking loss of every head."""
    # Smoothness of the step function H (App. E, Eq. 14); the only hyperparameter of aLRP Loss.
    alrp.DELTA = 1.0
    # Localisation error E_loc: "giou" ((1 - GIoU) / 2) or "iou" (1 - IoU), divided by 1 - TAU.
    alrp.LOC_ERROR = "giou"
    # Positive-labelling IoU threshold used to normalise E_loc (Sec. 2.2).
    alrp.TAU = 0.5
    # The ranking criterion of every head, a class name registered in alrp_d2.criteria.RANKING_CRITERION_REGISTRY:
    # "AlrpCriterion" (aLRP Loss); "InterpolatedAPCriterion" (the official, interpolated AP Loss that trained the
    # paper's AP Loss rows, Table 2 / App. G) or "APCriterion" (AP Loss without interpolation, an ablation), each
    # with the localisation loss AP_LOC_LOSS; "RankSortCriterion" (Rank & Sort Loss, Oksuz et al., ICCV 2021: IoU
    # targets, the box loss weighted by the detached scores and balanced by the loss values of every iteration;
    # SB_ENABLED must be False); or a criterion registered by your own module (docs/criteria.md).
    alrp.CRITERION = "AlrpCriterion"
    # The batch every ranking-loss head ranks: "per_worker" (each worker its own images, as the paper
    # trains) or "global" (the images of all workers as one exact ranking; alrp_d2/losses/global_ranking.py).
    alrp.RANKING = "per_worker"
    # Correlation Loss (Kahraman et al., AAAI 2023) added to every head's loss as loss_<head>_corr: CORR_WEIGHT * (1 -
    # corr(scores, IoUs)) of the positives, corr "spearman" (of soft ranks), "concordance" or "pearson"
    # (alrp_d2.losses.CORRELATION_KINDS); CORR_PER_LEVEL: the mean over the pyramid levels with >= 2 positives, or one
    # correlation of all positives. CORR_WEIGHT 0: no term.
    alrp.CORR_KIND = "spearman"
    alrp.CORR_WEIGHT = 0.0
    alrp.CORR_PER_LEVEL = True


def _add_self_balance_keys(alrp: CN) -> None:
    """MODEL.ALRP keys of the localisation weight."""
    # Self-balance (Sec. 4.2, App. F.3): the localisation weight becomes mean(L) / mean(L_loc) of the
    # previous period; SB_PERIOD = 0 means one epoch (training images / IMS_PER_BATCH).
    alrp.SB_ENABLED = True
    alrp.SB_INIT_WEIGHT = 50.0
    alrp.SB_PERIOD = 0
    # Constant localisation weight w_r used when SB is off (paper Table 3).
    alrp.LOC_WEIGHT = 1.0


def _add_retinanet_keys(alrp: CN) -> None:
    """MODEL.ALRP keys of aLRP RetinaNet's assignment and inference."""
    # Anchor assignment of aLRP RetinaNet: "iou" (detectron2's Matcher with
    # MODEL.RETINANET.IOU_THRESHOLDS) or "atss" (Zhang et al., CVPR 2020).
    alrp.MATCHER = "iou"
    alrp.ATSS_TOPK = 9
    # The ground truth of a low-quality match (LOW_QUALITY_MATCH_GTS), for MATCHER "iou" and AlrpRPN: "max_iou"
    # (detectron2) or "best_anchor" (the official MaxIoUAssigner).
    alrp.LOW_QUALITY_MATCH_GT = "max_iou"
    # Localisation loss with an AP criterion (alrp_d2.criteria.AP_LOC_LOSSES): the E_loc of LOC_ERROR
    # ("giou") or the head's Smooth L1 (MODEL.RETINANET.SMOOTH_L1_LOSS_BETA, MODEL.FOVEABOX.SMOOTH_L1_BETA, ...) on the
    # encoded deltas, averaged over the four.
    alrp.AP_LOC_LOSS = "giou"
    # AlrpRetinaNet test order: True follows the official test (per level the TOPK_CANDIDATES_TEST anchors
    # with the best class scores, then every class above SCORE_THRESH_TEST, boxes clipped before NMS; the
    # paper configs), False detectron2's RetinaNet (threshold, top-k (anchor, class) pairs, clip after NMS).
    # False by default: a detectron2 config switched to AlrpRetinaNet changes only its training loss.
    alrp.OFFICIAL_INFERENCE = False


def _add_faster_rcnn_keys(alrp: CN) -> None:
    """MODEL.ALRP keys of aLRP Faster R-CNN's RPN."""
    # aLRP Faster R-CNN (Sec. 5.4, App. G.4): weight of the whole RPN loss, the RPN's own tau
    # (its positives are IoU >= 0.7) and delta.
    alrp.RPN_WEIGHT = 0.2
    alrp.RPN_TAU = 0.7
    alrp.RPN_DELTA = 1.0
    # Paper recipe: AlrpRPN makes low-quality matches (Faster R-CNN's rule (i)) only for the ground
    # truths whose best anchor IoU is at least this (the official RPN assigner's min_pos_iou, 0.3 in the paper
    # config); 0.0 keeps detectron2's RPN Matcher.
    alrp.RPN_LOW_QUALITY_MIN_IOU = 0.0
    # Initial objectness bias of the RPN, log(p / (1 - p)): 0.5 gives detectron2's 0; the official aLRP RPN 0.01.
    alrp.RPN_PRIOR_PROB = 0.5


def _add_network_keys(cfg: CN) -> None:
    """Keys that build the official network (mmdetection 2.x) where detectron2 differs; every default keeps
    detectron2's behaviour (docs/paper_notes.md, "The official network")."""
    # The FPN of the registered backbones (FPN_KEY_BACKBONES): P7 = conv(ReLU(P6)) (detectron2's LastLevelP6P7)
    # or conv(P6) (mmdetection's relu_before_extra_convs=False); the convolutions' initialisation
    # (FPN_WEIGHT_INITS).
    cfg.MODEL.FPN.RELU_BEFORE_P7 = True
    cfg.MODEL.FPN.WEIGHT_INIT = "c2_xavier_fill"
    # OctaveAnchorGenerator (MODEL.ANCHOR_GENERATOR.NAME): sizes OCTAVE_BASE_SCALE * stride * 2^(i /
    # SCALES_PER_OCTAVE), computed in mmdetection's float32 order; SIZES must list the same sizes (to 1e-3 px).
    cfg.MODEL.ANCHOR_GENERATOR.OCTAVE_BASE_SCALE = 4.0
    cfg.MODEL.ANCHOR_GENERATOR.SCALES_PER_OCTAVE = 2
    # Detections that clipping made empty are kept (mmdetection) instead of dropped (detectron2's
    # detector_postprocess). Zero-area proposals: MODEL.PROPOSAL_GENERATOR.MIN_SIZE -1.
    cfg.TEST.KEEP_EMPTY_DETECTIONS = False
    # Evaluate the first N images of each dataset of DATASETS.TEST (0: all), scored against those images only.
    cfg.TEST.MAX_IMAGES = 0
    # Test-time resize (TEST_RESIZES): "detectron2" (ResizeShortestEdge) or "mmcv" (imrescale: cv2 bilinear,
    # mmcv's scale and rounding), both to INPUT.MIN_SIZE_TEST / MAX_SIZE_TEST.
    cfg.INPUT.TEST_RESIZE = "detectron2"
    # Training images and boxes (TRAIN_FILTERS): "detectron2" (DATALOADER.FILTER_EMPTY_ANNOTATIONS) or "mmdet"
    # (mmdetection's CocoDataset: images of a side < 32 px or without any annotation dropped, crowd-only images
    # kept; boxes under 1 px, of zero area or outside the image dropped).
    cfg.DATALOADER.TRAIN_FILTER = "detectron2"


def _add_rank_sort_keys(alrp: CN) -> None:
    """MODEL.ALRP keys of the detectors trained by Rank & Sort Loss."""
    # RS Mask R-CNN (RankSortMaskHead): at most this many positives of a worker's batch train the mask head, a
    # random subset when there are more (the official RankBasedStandardRoIHead's resampling, 200).
    alrp.MASK_MAX_POSITIVES = 200


def _dense_head_config(norm: str, focal_alpha: float, focal_gamma: float, score_thresh: float, nms: float) -> CN:
    """The keys a dense detector's head shares with detectron2's MODEL.RETINANET: 80 classes on
    p3-p7, 4 convs per branch, prior 0.01, the focal-loss parameters of its own loss, and inference
    (score threshold, top 1000 candidates per level, NMS threshold)."""
    node = CN()
    node.NUM_CLASSES = 80
    node.IN_FEATURES = ["p3", "p4", "p5", "p6", "p7"]
    node.NUM_CONVS = 4
    node.NORM = norm
    node.PRIOR_PROB = 0.01
    node.FOCAL_LOSS_ALPHA = focal_alpha
    node.FOCAL_LOSS_GAMMA = focal_gamma
    node.SCORE_THRESH_TEST = score_thresh
    node.TOPK_CANDIDATES_TEST = 1000
    node.NMS_THRESH_TEST = nms
    return node
