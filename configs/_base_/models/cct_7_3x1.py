# CCT-7/3x1, `cct_7_3x1_32` (SHI-Labs/Compact-Transformers) at its native
# 32x32 input: one 3x3 conv (3->256) + ReLU + max-pool tokenizer (16x16 =
# 256 tokens), learnable position embedding, 7 layers (dim 256, 4 heads, MLP
# x2), final LN, SeqPool. Attention dropout 0.1, drop path 0.1, dropout 0
# (the reference's defaults). 3,760,139 parameters (10 classes).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='CCT',
        arch='7_3x1',
        img_size=32,
        positional_embedding='learnable',
        drop_rate=0.,
        attn_drop_rate=0.1,
        drop_path_rate=0.1,
    ),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=256,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    ),
)
