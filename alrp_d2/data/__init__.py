"""Data pipeline of alrp-d2: SSD augmentation, the box-aware dataset mapper and the synthetic
"shapes" dataset. Importing this package registers ``shapes_train`` / ``shapes_val`` lazily (no file
is generated until the first ``DatasetCatalog.get``)."""

from .augmentation import (
    SSD_IMAGE_FORMATS,
    CenterFilteredCropTransform,
    ExpandTransform,
    PhotometricDistortion,
    PhotometricDistortionParams,
    RandomExpand,
    RandomMinIoUCrop,
    build_ssd_augmentation,
    validate_ssd_config,
)
from .dataset_mapper import AlrpDatasetMapper, annotation_boxes, build_alrp_mapper
from .shapes import (
    DATASETS_ROOT_ENV,
    SHAPES_CLASSES,
    SHAPES_DATASETS,
    SHAPES_SPLIT_SEEDS,
    SHAPES_SPLIT_SIZES,
    default_datasets_root,
    prepare_shapes_dataset,
    register_shapes_datasets,
    shapes_paths,
)

__all__ = [
    "SSD_IMAGE_FORMATS",
    "CenterFilteredCropTransform",
    "ExpandTransform",
    "PhotometricDistortion",
    "PhotometricDistortionParams",
    "RandomExpand",
    "RandomMinIoUCrop",
    "build_ssd_augmentation",
    "validate_ssd_config",
    "AlrpDatasetMapper",
    "annotation_boxes",
    "build_alrp_mapper",
    "DATASETS_ROOT_ENV",
    "SHAPES_CLASSES",
    "SHAPES_DATASETS",
    "SHAPES_SPLIT_SEEDS",
    "SHAPES_SPLIT_SIZES",
    "default_datasets_root",
    "prepare_shapes_dataset",
    "register_shapes_datasets",
    "shapes_paths",
]

register_shapes_datasets(eager=False)
