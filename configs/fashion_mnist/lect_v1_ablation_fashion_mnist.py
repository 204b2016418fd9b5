# The LeCT report's ablation (Table 3: LeCT v1 without the convolutional skip,
# q/k/v projected in parallel) on Fashion-MNIST with the report's protocol
# (the `gpu` protocol of tools/benchmark_accuracy.py): 224x224 input,
# RandomCrop + flip + RandAugment, all 60,000 training images, 5 epochs.
_base_ = [
    '../_base_/models/lect_v1_ablation.py',
    '../_base_/datasets/fashion_mnist.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=5)
