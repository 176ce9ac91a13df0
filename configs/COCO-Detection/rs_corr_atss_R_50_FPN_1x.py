# RS-ATSS + Correlation Loss (rank_corr_atss_r50_fpn_1x_coco_w02_concordance.py of the rs-corr branch of
# fehmikahraman/RankSortLoss): RS-ATSS with 0.2 x (1 - concordance correlation) of the positives' scores and IoUs, all
# levels at once. No published figure is quoted; not trained here. Twin: configs/rs_corr_atss_R50_FPN_1x.yaml.
from alrp_d2.lazy_config import correlation

from .rs_atss_R_50_FPN_1x import dataloader, lr_multiplier, model, optimizer, train

model.ranking_loss.terms = [correlation("concordance", weight=0.2, per_level=False)]
