# The LRP evaluator (COCO AP and LRP, the LRP-optimal thresholds in train.output_dir/inference) on dataloader.test.
from detectron2.config import LazyCall as L

from alrp_d2.evaluation import COCOLRPEvaluator

lrp_evaluator = L(COCOLRPEvaluator)(
    dataset_name="${..test.dataset.names}", output_dir="${...train.output_dir}/inference"
)
