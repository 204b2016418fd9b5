# AlterNet-18 (Park & Kim 2022, official `alternet.dnn_18(stem=True)`):
# pre-activation ResNet-18, the last block of stages 2-4 a
# 7x7-window MSA block (6/12/24 heads of 64 channels, one shared 13x13
# relative-position bias per block, no MLP); classifier BN -> ReLU (backbone
# output norm) -> GAP (neck) -> Linear (head). PyTorch default init, as the
# official code. Inputs must be multiples of 224. 9,460,933 parameters
# (10 classes). Drop path 0.1 (rate * j / 7 over the 8 blocks) is the
# report's setting; the official default is 0 and the author's value is
# unknown. The attention-projection dropout stays at the official 0.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='AlterNet',
        arch='18',
        stem_type='conv7x7',
        window_size=7,
        drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=512,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        init_cfg=None,
    ),
)
