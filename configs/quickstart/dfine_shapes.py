# Quickstart (LazyConfig): a small D-FINE trained from scratch on the synthetic shapes dataset, on a CPU, with
# Rank & Sort Loss in place of its classification term (its L1, GIoU, FGL and DDF box terms its own).
# python train_net.py --config-file configs/quickstart/dfine_shapes.py
# Other losses: model.loss=null (D-FINE's own varifocal loss), or aLRP Loss:
# model.loss.criterion._target_=alrp_d2.criteria.AlrpCriterion model.loss.criterion.delta=1.0
# model.loss.criterion.tau=0.0. docs/detr.md, "Ranking losses against the models' own, 3 seeds".
from .rtdetr_shapes import dataloader, lr_multiplier, model, optimizer, train

# D-FINE (Peng et al., 2025) of the RT-DETR v2 quickstart's sizes: the same ResNet-vd, encoder and 3 decoder layers
# of 100 queries and 30 denoising queries; D-FINE's own distribution heads (32 bins) and localisation quality head.
model.hf_config.model_type = "d_fine"
model.loss.box_terms = "model"
train.output_dir = "output/quickstart_dfine"
