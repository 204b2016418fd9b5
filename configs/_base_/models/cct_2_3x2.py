# CCT-2/3x2, `cct_2_3x2_32` (SHI-Labs/Compact-Transformers) at its native
# 32x32 input: two 3x3 conv + ReLU + max-pool blocks (3->64->128; 8x8 = 64
# tokens), learnable position embedding, 2 layers (dim 128, 2 heads, MLP x1),
# final LN, SeqPool. Attention dropout 0.1, drop path 0.1, dropout 0.
# 283,723 parameters (10 classes).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='CCT',
        arch='2_3x2',
        img_size=32,
        positional_embedding='learnable',
        drop_rate=0.,
        attn_drop_rate=0.1,
        drop_path_rate=0.1,
    ),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=128,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    ),
)
