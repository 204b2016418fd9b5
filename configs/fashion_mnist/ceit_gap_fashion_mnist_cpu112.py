# CeiT with the report's GAP head on Fashion-MNIST at 112x112 for a 2-core CPU
# (the `cpu112` protocol of tools/benchmark_accuracy.py): the `cpu` protocol
# (10,000 training images, RandomCrop + flip, the report's optimiser and cosine
# schedule over 8 epochs) at 112x112 input instead of 64x64.
_base_ = [
    '../_base_/models/ceit_gap.py',
    '../_base_/datasets/fashion_mnist_112px.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=8)
model = dict(backbone=dict(img_size=112))
