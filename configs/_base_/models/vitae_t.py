# ViTAE-T, `ViTAE_basic_Tiny` (ViTAE-Transformer): three reduction cells
# (PRM + PCM + token Performer in the first two, PRM only in the third) and
# 7 normal cells at dim 256 (4 heads, MLP x2, PCM groups 64); no class token
# or position embedding; mean over the tokens -> Linear, i.e. the last stage
# map + GlobalAveragePooling + LinearClsHead. 4,632,458 parameters (10
# classes), of which 4,096 are the frozen Performer random features. Drop
# path 0.1 as in the LeCT report's training setting (the model's own default
# is 0).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ViTAE',
        arch='tiny',
        drop_rate=0.,
        drop_path_rate=0.1,
    ),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=256,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    ),
)
