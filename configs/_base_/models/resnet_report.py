# The LeCT author's ResNet baseline (`ResNet.py`): post-activation
# BasicBlocks [2, 2, 2, 2] with widths 32/64/96/128, 7x7/2 stem + max-pool,
# GAP, Linear(128 -> classes). 1,052,650 parameters (10 classes).
# Drop path 0.1 (linspace over the 8 blocks) is the report's setting; the
# author's model line leaves it at 0 (`--cfg-options
# model.backbone.drop_path_rate=0.`). PyTorch default init, as the author's.
model = dict(
    type='ImageClassifier',
    backbone=dict(type='NarrowResNet', arch='report', drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=128,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=None,
    ),
)
