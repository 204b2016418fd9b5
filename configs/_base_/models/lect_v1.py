# LeCT (v1) of the LeCT report (§3): widths 64/128/192, depths 1/3/1, heads
# 2/4/6, FFN ratios 2/3/4, sr_ratio 14/7/2, LeMSA with bilinear key resize
# and a bilinear + DWConv + BN query upsampler. The arch lives in
# LeCT.arch_zoo['v1']; drop_rate 0.1 (attention projection and FFN), drop
# path 0.1. 1,151,562 parameters with 10 classes (reference implementation:
# 1.1516 M).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='LeCT',
        arch='v1',
        drop_rate=0.1,
        attn_drop_rate=0.,
        drop_path_rate=0.1,
        out_indices=(2, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=192,  # == LeCT.arch_zoo['v1']['embed_dims'][-1] (tested)
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.)),
)
