"""The classes of the datasets a config trains and evaluates on (DATASETS.TRAIN and DATASETS.TEST),
checked before training or evaluation: each has the model's number of classes, no duplicate
category id or name, and all have the same classes in the same contiguous order, so that a test
set whose category ids are permuted is never evaluated with swapped classes. Checkpoints record
the classes they were trained on (:func:`classes_record`), which evaluation and prediction compare
with their datasets' (:func:`check_same_classes`)."""

from __future__ import annotations

import functools
import logging
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from detectron2.config import CfgNode
from detectron2.data import DatasetCatalog, MetadataCatalog
from detectron2.modeling import META_ARCH_REGISTRY, GeneralizedRCNN, RetinaNet

from ..json_file import load_json

__all__ = [
    "ClassesMismatchError",
    "DETECTRON2_NUM_CLASSES_KEYS",
    "DatasetClasses",
    "check_classes",
    "check_dataset_classes",
    "check_same_classes",
    "classes_from_record",
    "classes_record",
    "dataset_classes",
    "duplicate_classes",
    "model_num_classes",
    "num_classes_key",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DatasetClasses:
    """The classes of one dataset in contiguous order (class i of the model is ``names[i]``), with
    the dataset's category ids (``ids[i]``; None when the metadata has no
    ``thing_dataset_id_to_contiguous_id``, i.e. the contiguous ids are the dataset's)."""

    dataset: str
    names: Tuple[str, ...]
    ids: Optional[Tuple[int, ...]]

    def category_ids(self) -> Tuple[int, ...]:
        """The category id of each class as detectron2's COCO evaluation writes it."""
        return self.ids if self.ids is not None else tuple(range(len(self.names)))

    def entries(self) -> List[Tuple[int, str]]:
        """(category id, name) in class order."""
        return list(zip(self.category_ids(), self.names))


class ClassesMismatchError(ValueError):
    """Weights or a threshold file made for other classes, or the same classes in another order,
    than the dataset they are used with; the message shows both lists."""


def classes_record(classes: DatasetClasses) -> Dict[str, Any]:
    """The classes as a checkpoint records them: the dataset's name, the class names in contiguous
    order and the dataset's category ids (None when its metadata has none)."""
    return {
        "dataset": classes.dataset,
        "names": list(classes.names),
        "category_ids": None if classes.ids is None else list(classes.ids),
    }


def classes_from_record(record: Any, source: str) -> DatasetClasses:
    """The :class:`DatasetClasses` of a :func:`classes_record` read from ``source`` (a file)."""
    if (
        not isinstance(record, Mapping)
        or not isinstance(record.get("names"), list)
        or not all(isinstance(name, str) for name in record["names"])
        or not (record.get("category_ids") is None or isinstance(record["category_ids"], list))
    ):
        raise ValueError(f"{source}: its record of classes is not {{'dataset', 'names', 'category_ids'}}: {record!r}")
    ids = record["category_ids"]
    if ids is not None and (len(ids) != len(record["names"]) or not all(type(i) is int for i in ids)):
        raise ValueError(f"{source}: its record has {len(record['names'])} class names but category ids {ids!r}")
    return DatasetClasses(str(record.get("dataset")), tuple(record["names"]), None if ids is None else tuple(ids))


def check_same_classes(recorded: DatasetClasses, source: str, given: DatasetClasses) -> None:
    """Raises :class:`ClassesMismatchError` showing both lists when ``source`` (weights or a
    threshold file, made for ``recorded``) is used with the dataset of ``given`` classes that are
    not the same classes in the same order (the category ids are compared where both have them)."""
    if _same_classes(recorded, given):
        return
    raise ClassesMismatchError(
        f"{source} was made for other classes than dataset {given.dataset!r} (class i of the model is the i-th "
        f"(category id, name)):\n  {source} (dataset {recorded.dataset!r}): {recorded.entries()}\n  "
        f"{given.dataset}: {given.entries()}\nEvaluating or predicting with it would swap or mislabel classes: use "
        "weights trained on these classes, or a dataset with the classes of the weights."
    )


def duplicate_classes(entries: Sequence[Tuple[int, str]]) -> List[str]:
    """One line per category id or name that appears more than once among (id, name) ``entries``,
    naming the entries."""
    lines = []
    for position, kind in ((0, "id"), (1, "name")):
        counts = Counter(entry[position] for entry in entries)
        for value, count in counts.items():
            if count > 1:
                clashing = [{"id": i, "name": n} for i, n in entries if (i, n)[position] == value]
                lines.append(f"category {kind} {value!r} appears {count} times: {clashing}")
    return lines


@functools.lru_cache(maxsize=16)
def _json_categories(json_file: str, modified: int, size: int) -> Tuple[Tuple[int, str], ...]:
    """(id, name) of the categories of a COCO annotation file sorted by id (detectron2's class
    order); cached per file version (``modified``, ``size``)."""
    with open(json_file, "rb") as f:
        content = load_json(f, json_file)
    categories = content.get("categories") if isinstance(content, dict) else None
    if not isinstance(categories, list) or not all(
        isinstance(c, dict) and {"id", "name"} <= set(c) for c in categories
    ):
        raise ValueError(f"{json_file} has no COCO 'categories' list of {{'id': ..., 'name': ...}} objects")
    return tuple(sorted((c["id"], c["name"]) for c in categories))


def dataset_classes(name: str) -> Optional[DatasetClasses]:
    """The classes ``MetadataCatalog`` declares for dataset ``name`` (``thing_classes`` and
    ``thing_dataset_id_to_contiguous_id``), or for a COCO dataset not loaded yet (only ``json_file``
    in its metadata, e.g. ``register_coco_instances``) those of its annotation file, which
    detectron2's ``load_coco_json`` will use; None when neither exists."""
    metadata = MetadataCatalog.get(name)
    names = metadata.get("thing_classes")
    json_file = metadata.get("json_file")
    if names is None and json_file and os.path.isfile(json_file):
        stat = os.stat(json_file)
        categories = _json_categories(json_file, stat.st_mtime_ns, stat.st_size)
        return DatasetClasses(name, tuple(n for _, n in categories), tuple(i for i, _ in categories))
    if names is None:
        return None
    id_map: Optional[Dict[int, int]] = metadata.get("thing_dataset_id_to_contiguous_id")
    if not id_map:
        return DatasetClasses(name, tuple(names), None)
    by_class = {contiguous: dataset_id for dataset_id, contiguous in id_map.items()}
    if sorted(by_class) != list(range(len(names))) or len(by_class) != len(id_map):
        raise ValueError(
            f"dataset {name!r}: thing_dataset_id_to_contiguous_id {id_map} does not map its category ids one to one "
            f"onto the {len(names)} classes {list(names)}"
        )
    return DatasetClasses(name, tuple(names), tuple(by_class[i] for i in range(len(names))))


#: The number-of-classes key of detectron2's meta-architectures, which cannot declare it themselves: the key of the
#: first of these classes the architecture is (a subclass of).
DETECTRON2_NUM_CLASSES_KEYS: Tuple[Tuple[type, str], ...] = (
    (GeneralizedRCNN, "MODEL.ROI_HEADS.NUM_CLASSES"),
    (RetinaNet, "MODEL.RETINANET.NUM_CLASSES"),
)


def num_classes_key(cfg: CfgNode) -> str:
    """The config key of the number of classes of cfg's detector, as its registered meta-architecture says: its class
    attribute ``num_classes_key`` (the project's detectors, e.g. ``HuggingFaceDETR``'s ``MODEL.DETR.NUM_CLASSES``), or
    for detectron2's :data:`DETECTRON2_NUM_CLASSES_KEYS`. Raises ValueError naming MODEL.META_ARCHITECTURE for an
    unregistered architecture or one that does not say where its count lives."""
    architecture = cfg.MODEL.META_ARCHITECTURE
    if architecture not in META_ARCH_REGISTRY:
        raise ValueError(
            f"MODEL.META_ARCHITECTURE {architecture!r} is not registered in detectron2's META_ARCH_REGISTRY: "
            "--import the module that registers it"
        )
    model_class = META_ARCH_REGISTRY.get(architecture)
    declared = getattr(model_class, "num_classes_key", None)
    if isinstance(declared, str):
        return declared
    for base, key in DETECTRON2_NUM_CLASSES_KEYS:
        if issubclass(model_class, base):
            return key
    raise ValueError(
        f"MODEL.META_ARCHITECTURE {architecture!r} does not say which config key holds its number of classes: give "
        f"{model_class.__name__} the class attribute num_classes_key (e.g. 'MODEL.ROI_HEADS.NUM_CLASSES')"
    )


def model_num_classes(cfg: CfgNode) -> Tuple[str, int]:
    """The config key of the number of classes of cfg's detector and its value."""
    key = num_classes_key(cfg)
    node = cfg
    for part in key.split(".")[:-1]:
        node = node[part]
    return key, node.NUM_CLASSES


def _same_classes(a: DatasetClasses, b: DatasetClasses) -> bool:
    """Same names in the same order, and the same category ids where both datasets have their own."""
    return a.names == b.names and (a.ids is None or b.ids is None or a.ids == b.ids)


def check_dataset_classes(cfg: CfgNode, include_train: bool = True, options: str = "the command line") -> None:
    """:func:`check_classes` of the datasets of DATASETS.TRAIN (unless not ``include_train``: evaluation or
    prediction only, where the classes of the weights are those their checkpoint records) and DATASETS.TEST against
    the model's number of classes; ``options``: where the user sets config keys (e.g. demo.py's ``--opts``)."""
    key, expected = model_num_classes(cfg)
    train = cfg.DATASETS.TRAIN if include_train else ()
    check_classes({"DATASETS.TRAIN": train, "DATASETS.TEST": cfg.DATASETS.TEST}, key, expected, options=options)


def check_classes(
    datasets: Mapping[str, Sequence[str]],
    key: str,
    expected: int,
    assign: str = " ",
    options: str = "the command line",
) -> None:
    """Raises ValueError, before training or evaluation, when a registered dataset of ``datasets`` ({config key:
    dataset names}, the training ones first) has another number of classes than the model (``expected``, naming
    ``key`` to set: ``key<assign>value`` on the command line), has a category id or name twice, or has other classes,
    or the same classes in another order, than the first of them (showing both lists). A dataset whose metadata
    declares no classes (:func:`dataset_classes`) is not checked (a warning says so); an unregistered name is left to
    detectron2's error. ``options``: where the user sets config keys, named in the advice."""
    checked: List[DatasetClasses] = []
    roles = {name: role for role, names in reversed(list(datasets.items())) for name in names}
    for name in dict.fromkeys(name for names in datasets.values() for name in names):
        if name not in DatasetCatalog.list():
            continue
        classes = dataset_classes(name)
        if classes is None:
            logger.warning(f"Dataset {name!r} declares no classes (no thing_classes or json_file): not checked")
            continue
        duplicates = duplicate_classes(classes.entries())
        if duplicates:
            raise ValueError(f"dataset {name!r} has duplicate categories:\n  " + "\n  ".join(duplicates))
        if len(classes.names) != expected:
            raise ValueError(
                f"dataset {name!r} ({roles[name]}) has {len(classes.names)} categories but {key} is {expected}: "
                f"add `{key}{assign}{len(classes.names)}` to {options}"
            )
        if checked and not _same_classes(checked[0], classes):
            raise ValueError(
                f"datasets {checked[0].dataset!r} and {name!r} have different classes (class i of the model is the "
                f"i-th (category id, name)):\n  {checked[0].dataset}: {checked[0].entries()}\n  {name}: "
                f"{classes.entries()}\nA model trained on one would be evaluated with swapped classes: give "
                "both the same categories (same ids and names)."
            )
        checked.append(classes)
