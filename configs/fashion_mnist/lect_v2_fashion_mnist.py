# LeCT v2 on Fashion-MNIST with the LeCT report's protocol: 224x224 input,
# RandomCrop + flip + RandAugment, the full 60,000 training images, the
# report's optimiser and cosine schedule over 5 epochs (the `gpu` protocol of
# tools/benchmark_accuracy.py; fits one H100 with the rest of the set).
_base_ = [
    '../_base_/models/lect_v2.py',
    '../_base_/datasets/fashion_mnist.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=5)
