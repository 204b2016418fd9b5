# CCT-7/3x1 on Fashion-MNIST with the LeCT report's augmentation and schedule
# (the `gpu` protocol of tools/benchmark_accuracy.py) at CCT's native 32x32:
# its tokenizer keeps half the input resolution, so at 224x224 it would attend
# over 12,544 tokens.
_base_ = [
    '../_base_/models/cct_7_3x1.py',
    '../_base_/datasets/fashion_mnist.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=5)
data_preprocessor = dict(size=32)
