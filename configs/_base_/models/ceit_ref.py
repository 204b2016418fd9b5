# CeiT as published in the LeCT author's `CeiT(GAP).py`: Image2Tokens stem
# with 128 channels, dim 112, 8 blocks, 4 heads, LeFF x2, class token +
# learnable position embedding (224 input), layer-wise class-token attention
# (LCA) whose MLP is 112->112->112 (the author's `Mlp` ignores its hidden
# width), final LN on the refined class token. Drop path linspace(0, 0.1, 8),
# dropout 0 (the file's drop_rate), LN eps 1e-6. The backbone returns the
# normalised class token (B, 112); there is no global average pooling
# despite the file name. 1,188,922 parameters (10 classes).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='CeiT',
        arch='ref',
        img_size=224,
        drop_rate=0.,
        drop_path_rate=0.1,
    ),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=112,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    ),
)
