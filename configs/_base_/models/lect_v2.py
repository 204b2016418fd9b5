# LeCT v2 of the LeCT report (Appendix "LeCTv2"): LeCT with the
# frequency-ramp split attention LeMSAv2 (h_ratio 1/2, 1/4, 1/8), heads
# 2/3/7, sr_ratio 14/7/7, bicubic key/query resize in stage 1 and bilinear
# later. The arch lives in LeCT.arch_zoo['v2']. 1,085,434 parameters with
# 10 classes (reference implementation: 1.0854 M).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='LeCT',
        arch='v2',
        drop_rate=0.1,
        attn_drop_rate=0.,
        drop_path_rate=0.1,
        out_indices=(2, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=192,  # == LeCT.arch_zoo['v2']['embed_dims'][-1] (tested)
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.)),
)
