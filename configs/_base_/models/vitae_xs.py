# ViTAE at the LeCT report's ~1.2M scale (arch 'xs', our design, not from the
# paper): ViTAE-T with every width halved (PRM/PCM 32/32/64 channels, tokens
# 32/32/128, PCM groups 32) and the same 7 normal cells with 4 heads (head
# dim 32). Not the paper's ViTAE-S (23.6M). 1,259,466 parameters (10
# classes), 1,024 of them frozen Performer features.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ViTAE',
        arch='xs',
        drop_rate=0.,
        drop_path_rate=0.1,
    ),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=128,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    ),
)
