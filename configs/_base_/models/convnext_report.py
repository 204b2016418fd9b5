# The LeCT author's ConvNeXt baseline (`ConvNeXt.py`) built from mmpretrain's
# own ConvNeXt: depths [1, 1, 4, 1], channels [64, 96, 128, 196], 4x4/4 stem
# + LN2d(eps 1e-6), LN + 2x2/2 downsamples, layer scale 1e-6, drop path
# linspace(0, 0.1, 7), head mean -> LN -> Linear (gap_before_final_norm).
# Trunc-normal(0.02) init of every Conv2d/Linear with zero bias, as the
# author's code. 1,169,158 parameters (10 classes).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ConvNeXt',
        arch=dict(depths=[1, 1, 4, 1], channels=[64, 96, 128, 196]),
        drop_path_rate=0.1,
        layer_scale_init_value=1e-6,
        gap_before_final_norm=True,
    ),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=196,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=None,
    ),
    init_cfg=dict(
        type='TruncNormal', layer=['Conv2d', 'Linear'], std=.02, bias=0.),
)
