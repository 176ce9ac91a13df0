"""Data pipeline of alrp-d2: SSD augmentation, the box-aware dataset mapper and the synthetic
"shapes" dataset. Importing this package registers ``shapes_train`` / ``shapes_val`` lazily (no file
is generated until the first ``DatasetCatalog.get``)."""

from .augmentation import build_ssd_augmentation
from .dataset_mapper import AlrpDatasetMapper, build_alrp_mapper
from .shapes import SHAPES_DATASETS, prepare_shapes_dataset, register_shapes_datasets

__all__ = [
    "AlrpDatasetMapper",
    "SHAPES_DATASETS",
    "build_alrp_mapper",
    "build_ssd_augmentation",
    "prepare_shapes_dataset",
    "register_shapes_datasets",
]

register_shapes_datasets(eager=False)
