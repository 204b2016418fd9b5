# CeiT-T, the official `ceit_tiny_patch16_224` (coeusguo/ceit): Image2Tokens
# stem with 64 channels, dim 192, 12 blocks, 3 heads, LeFF x4, class token,
# LCA with a 192->768->192 MLP, final LN; drop path 0.1 (official default).
# 6,165,834 parameters (10 classes).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='CeiT',
        arch='tiny',
        img_size=224,
        drop_rate=0.,
        drop_path_rate=0.1,
    ),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=192,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    ),
)
