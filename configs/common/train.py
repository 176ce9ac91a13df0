# detectron2's training fields (common/train.py) plus the keys of alrp_d2.config.lazy_fields.TRAIN_DEFAULTS.
from detectron2.model_zoo import get_config

train = get_config("common/train.py").train
train.self_balance_period = 0  # iterations between self-balance updates; 0: one epoch (paper Sec. 4.2)
train.allow_partial_weights = False  # weights that do not fit the model are an error
train.skip_unreadable_images = False  # an unreadable training image stops training, naming the file
train.seed = -1  # < 0: drawn once, shared by the workers and saved in the checkpoints
train.eval_max_images = 0  # evaluate the first N images of each test dataset; 0: all
