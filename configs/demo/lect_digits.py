# The embedded-default demo (README command 1):
#   python tools/train.py configs/demo/lect_digits.py
# trains on scikit-learn's bundled digits (no download) in a few minutes on a
# 2-core CPU. Model: a narrow ResNet-18 for small images (mmpretrain's
# ResNet_CIFAR, widths 16-128, ~0.7 M parameters), a stand-in until a small
# LeCT replaces it.
_base_ = [
    '../_base_/datasets/digits.py',
    '../_base_/default_runtime.py',
]

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ResNet_CIFAR',
        depth=18,
        stem_channels=16,
        base_channels=16,
        num_stages=4,
        out_indices=(3, ),
        style='pytorch'),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=128,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0)))

optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05),
    clip_grad=dict(max_norm=5.0))

max_epochs = 12
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=0.1,
        by_epoch=True,
        begin=0,
        end=1,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=1,
        end=max_epochs,
        convert_to_iter_based=True),
]

train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
val_cfg = dict()
test_cfg = dict()

auto_scale_lr = dict(base_batch_size=64)

# 23 iterations per epoch: log more often than the runtime's default
default_hooks = dict(logger=dict(interval=10))
