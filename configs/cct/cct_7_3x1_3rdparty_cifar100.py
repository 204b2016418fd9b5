# CCT-7/3x1 (`cct_7_3x1_32_c100`) with the CCT authors' CIFAR-100 weights
# (SHI-Labs/Compact-Transformers, 300 epochs, learnable positions; 80.92 %
# top-1 as their README reports, Apache-2.0): the model of
# cct_7_3x1_cifar100.py and the authors' test-time normalisation (their
# configs/datasets/cifar100.yml: 32x32, no resize).
_base_ = ['./cct_7_3x1_cifar100.py']

data_preprocessor = dict(
    # RGB mean (0.5071, 0.4867, 0.4408), std (0.2675, 0.2565, 0.2761) x 255
    mean=[129.3105, 124.1085, 112.404],
    std=[68.2125, 65.4075, 70.4055])
