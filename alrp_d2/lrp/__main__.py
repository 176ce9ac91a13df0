"""``python -m alrp_d2.lrp GT.json DETECTIONS.json [--iou-type bbox|segm|keypoints] [--json]``: LRP of COCO results on
a COCO ground truth, as a table or one JSON object (the keys of :func:`~alrp_d2.lrp.evaluate_coco`, NaN as null); with
``--lvis``, of LVIS results on an LVIS ground truth (:mod:`.lvis_command`); with ``--panoptic GT_FOLDER
PRED_FOLDER``, GT.json and the second file are COCO panoptic files (:mod:`.panoptic_command`). A file that cannot be
evaluated is refused with one line naming the file and the entry, exit status 2."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Dict, List, Optional, Sequence

from .coco_api import evaluate_detections
from .coco_files import CocoFileError, load_coco_pair
from .command_output import cell, rows_text, without_nan
from .lvis_command import run_lvis
from .panoptic_command import run_panoptic
from .results import LRP_METRICS, PER_CLASS_KEYS


def results_table(results: Dict[str, Any], names: Dict[int, str], iou_type: str) -> str:
    """The means, then one line per category: ground truths, oLRP, its components and the LRP-optimal threshold."""
    summary = [list(LRP_METRICS), [cell(results[m]) for m in LRP_METRICS]]
    header = ["category", "id", "GTs", "oLRP", "oLRP_loc", "oLRP_FP", "oLRP_FN", "threshold"]
    per_class = [header]
    for i, category_id in enumerate(results["classes"]):
        values = [cell(results[key][i], 4 if key == "thresholds" else 3) for key in PER_CLASS_KEYS]
        per_class.append([names[category_id], str(category_id), str(results["num_gt_per_class"][i]), *values])
    similarity = "OKS" if iou_type == "keypoints" else "IoU"
    return (
        f"LRP ({iou_type}, {similarity} 0.5; x100 but rho; '-' undefined)\n{rows_text(summary)}\n\n"
        f"Per category (threshold: the LRP-optimal score threshold)\n{rows_text(per_class)}"
    )


def _sigmas(text: str) -> List[float]:
    try:
        sigmas = [float(value) for value in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated numbers expected, got {text!r}") from None
    if not all(math.isfinite(s) and s > 0 for s in sigmas):
        raise argparse.ArgumentTypeError(f"positive finite sigmas expected, got {text!r}")
    return sigmas


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m alrp_d2.lrp", description=__doc__.split("\n\n")[0])
    parser.add_argument("ground_truth", metavar="GT.json", help="COCO annotations (images, annotations, categories)")
    parser.add_argument("detections", metavar="DETECTIONS.json", help="COCO results (a list of detections)")
    parser.add_argument(
        "--iou-type", choices=("bbox", "segm", "keypoints"), default="bbox", help="boxes' or masks' IoUs, or OKS"
    )
    parser.add_argument(
        "--keypoint-sigmas",
        type=_sigmas,
        default=None,
        metavar="S1,S2,...",
        help="--iou-type keypoints: OKS sigmas of every category's keypoints, comma-separated (default: COCO's 17 of "
        "the person)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument(
        "--panoptic",
        nargs=2,
        metavar=("GT_FOLDER", "PRED_FOLDER"),
        help="panoptic LRP and PQ: the two files are COCO panoptic JSONs, these folders hold their PNGs",
    )
    parser.add_argument("--lvis", action="store_true", help="LVIS files: federated LRP by frequency group")
    args = parser.parse_args(argv)
    if args.keypoint_sigmas is not None and args.iou_type != "keypoints":
        parser.error(f"--keypoint-sigmas is for --iou-type keypoints, not {args.iou_type}")
    if args.panoptic:
        if args.iou_type != "bbox":
            parser.error("--iou-type does not apply to --panoptic")
        if args.lvis:
            parser.error("--lvis does not apply to --panoptic")
        gt_folder, pred_folder = args.panoptic
        return run_panoptic(args.ground_truth, args.detections, gt_folder, pred_folder, args.json)
    if args.lvis:
        if args.iou_type == "keypoints":
            parser.error("--lvis evaluates --iou-type bbox or segm")
        return run_lvis(args.ground_truth, args.detections, args.iou_type, args.json)
    try:
        coco_gt, detections = load_coco_pair(args.ground_truth, args.detections, args.iou_type, args.keypoint_sigmas)
    except CocoFileError as error:
        print(f"python -m alrp_d2.lrp: {error}", file=sys.stderr)
        return 2
    results = evaluate_detections(coco_gt, detections, args.iou_type, keypoint_sigmas=args.keypoint_sigmas)
    if args.json:
        print(json.dumps({key: without_nan(value) for key, value in results.items()}))
    else:
        names = {category["id"]: str(category["name"]) for category in coco_gt.dataset["categories"]}
        print(results_table(results, names, args.iou_type))
    return 0


if __name__ == "__main__":
    sys.exit(main())
