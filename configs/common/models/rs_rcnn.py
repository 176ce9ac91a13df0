# RS R-CNN and RS Mask R-CNN (Oksuz et al., ICCV 2021; official ranksort_{faster,mask}_rcnn_r50_fpn_1x_coco.py): both
# stages (and the mask head) trained by Rank & Sort Loss without sampling, the RPN's weighted 0.2; the official score
# threshold 0.4. The yacs twins are configs/rs_faster_rcnn_R50_FPN_1x.yaml and rs_mask_rcnn_R50_FPN_1x.yaml.
import copy

from detectron2.model_zoo import get_config

from alrp_d2.lazy_config import rank_sort_loss, ranked_rcnn

from .official_rcnn import model as faster_rcnn

faster_rcnn.roi_heads.box_predictor.test_score_thresh = 0.4
mask_rcnn = copy.deepcopy(faster_rcnn)
ranked_rcnn(faster_rcnn, rank_sort_loss)
# detectron2's mask head (common/models/mask_rcnn_fpn.py), trained as RS Mask R-CNN's by ranked_rcnn.
detectron2_heads = get_config("common/models/mask_rcnn_fpn.py").model.roi_heads
for mask_key in ("mask_in_features", "mask_pooler", "mask_head"):
    mask_rcnn.roi_heads[mask_key] = detectron2_heads[mask_key]
ranked_rcnn(mask_rcnn, rank_sort_loss)
