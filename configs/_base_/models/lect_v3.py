# LeCT v3 of the LeCT report (Appendix "LeCTv3"): LeCT whose
# query upsampler is the spatially-varying ConvTranspose (cr_ratio 0.1). Its
# per-position kernels are trained for img_size=224 (pooled grids 4x4, 4x4,
# 7x7) and resampled for other input sizes.
# The arch lives in LeCT.arch_zoo['v3']. 1,214,169 parameters with 10
# classes (reference implementation: 1.2142 M).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='LeCT',
        arch='v3',
        img_size=224,
        drop_rate=0.1,
        attn_drop_rate=0.,
        drop_path_rate=0.1,
        out_indices=(2, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=192,  # == LeCT.arch_zoo['v3']['embed_dims'][-1] (tested)
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.)),
)
