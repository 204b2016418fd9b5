# CeiT as the LeCT report describes its baseline (Section 4, Table 2
# caption): the author's widths (Image2Tokens 128 channels, dim 112, 8
# blocks, 4 heads, LeFF x2) without class token, LCA and layer position
# embedding; the patch tokens are averaged, normalised (LN) and classified.
# The published code does not contain this variant (it uses the class token
# and LCA, see ceit_ref.py); where the final LN sits is not specified, here
# it follows the mean. 1,111,418 parameters (10 classes).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='CeiT',
        arch='gap',
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
