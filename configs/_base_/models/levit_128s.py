# LeViT-128S (Graham et al. 2021): mmpretrain's LeViT blocks through
# `FlexibleLeViT`, which adds the official from-scratch init (every residual
# branch starts at zero) that mmpretrain's converted-weights LeViT lacks.
# Trained from scratch at the report's settings: no distillation head, one
# drop-path rate for every residual (as the official LeViT), classifier
# BN -> Linear with trunc-normal(0.02) weights (official `BN_Linear`).
# Input fixed at 224 (the attention biases are built for a 14x14 grid).
# 7,010,140 parameters (10 classes).
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='FlexibleLeViT',
        arch='128s',
        img_size=224,
        patch_size=16,
        attn_ratio=2,
        mlp_ratio=2,
        drop_path_rate=0.1,
        out_indices=(2, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LeViTClsHead',
        num_classes=10,
        in_channels=384,
        distillation=False,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    ),
)
