# LeCT (v1) on Fashion-MNIST at 112x112 for a 2-core CPU (the `cpu112` protocol
# of tools/benchmark_accuracy.py): the `cpu` protocol (10,000 training images,
# RandomCrop + flip, the report's optimiser and cosine schedule over 8 epochs)
# at 112x112 input instead of 64x64.
_base_ = [
    '../_base_/models/lect_v1.py',
    '../_base_/datasets/fashion_mnist_112px.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=8)

# At 112x112 the stages see 28x28, 14x14 and 7x7 maps. The report's rule
# (4x4 pooled grids in stages 1-2, a 7x7 pooled grid in stage 3, at 224 input)
# gives pooled grids of 4, 4 and 7 here: stage 3 attends over its whole 7x7
# map. Fixed grids (pool_size instead of the arch's sr_ratio), since 14 / 4
# has no integer stride.
model = dict(
    backbone=dict(attn_cfg=[
        dict(sr_ratio=None, pool_size=4),
        dict(sr_ratio=None, pool_size=4),
        dict(sr_ratio=None, pool_size=7),
    ]))
