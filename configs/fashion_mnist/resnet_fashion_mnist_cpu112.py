# the report's ResNet (widths 32-128) on Fashion-MNIST at 112x112 for a 2-core
# CPU (the `cpu112` protocol of tools/benchmark_accuracy.py): the `cpu`
# protocol (10,000 training images, RandomCrop + flip, the report's optimiser
# and cosine schedule over 8 epochs) at 112x112 input instead of 64x64.
_base_ = [
    '../_base_/models/resnet_report.py',
    '../_base_/datasets/fashion_mnist_112px.py',
    '../_base_/schedules/report_60e_lr6e-3.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=8)
