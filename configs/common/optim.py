# detectron2's SGD (common/optim.py) as the yacs configs build it: momentum 0.9, weight decay 1e-4 on every
# parameter, normalisation layers included (SOLVER.WEIGHT_DECAY_NORM of the paper configs).
from detectron2.model_zoo import get_config

SGD = get_config("common/optim.py").SGD
SGD.params.weight_decay_norm = 1e-4
