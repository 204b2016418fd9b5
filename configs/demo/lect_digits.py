# The embedded demo: LeCT v1 (the report's architecture, 1.15M parameters)
# trained on scikit-learn's bundled handwritten digits (no download), 32x32.
#
#   python tools/train.py configs/demo/lect_digits.py
#
# At 32x32 input the stages see 8x8, 4x4 and 2x2 token maps, so the spatial
# reduction ratios of the 224-input configs (14, 7, 2) are replaced by
# (2, 2, 1): pooled grids of 4x4, 2x2 and 2x2.
_base_ = [
    '../_base_/models/lect_v1.py',
    '../_base_/datasets/digits.py',
    '../_base_/default_runtime.py',
]

model = dict(
    backbone=dict(attn_cfg=[
        dict(sr_ratio=2),
        dict(sr_ratio=2),
        dict(sr_ratio=1),
    ]))

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

default_hooks = dict(logger=dict(interval=10))
