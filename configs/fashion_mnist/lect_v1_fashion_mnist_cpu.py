# LeCT (v1) on Fashion-MNIST for a 2-core CPU (the `cpu` protocol of
# tools/benchmark_accuracy.py): 64x64 input, 10,000 training images, RandomCrop
# + flip, the report's optimiser and cosine schedule over 8 epochs.
_base_ = [
    '../_base_/models/lect_v1.py',
    '../_base_/datasets/fashion_mnist_64px.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=8)

# At 64x64 the stages see 16x16, 8x8 and 4x4 maps. sr_ratio 4, 2, 1 keeps the
# report's 4x4 pooled grids of stages 1-2 (224 input: sr_ratio 14, 7); stage 3
# attends over its whole 4x4 map (224 input: a 7x7 pooled grid, larger than
# this map).
model = dict(
    backbone=dict(attn_cfg=[
        dict(sr_ratio=4),
        dict(sr_ratio=2),
        dict(sr_ratio=1),
    ]))
