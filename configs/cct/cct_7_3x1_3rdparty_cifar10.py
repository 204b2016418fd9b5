# CCT-7/3x1 (`cct_7_3x1_32`) with the CCT authors' CIFAR-10 weights
# (SHI-Labs/Compact-Transformers, 300 epochs, learnable positions; 96.53 %
# top-1 as their README reports, Apache-2.0): the model of
# cct_7_3x1_cifar10.py and the authors' test-time normalisation (their
# configs/datasets/cifar10.yml: 32x32, no resize). `get_model(
# 'cct-7-3x1_3rdparty-300e_cifar10', pretrained=True)` loads the weights,
# converted on load (model-index `Weights: lect_mm+URL`).
_base_ = ['./cct_7_3x1_cifar10.py']

data_preprocessor = dict(
    # RGB mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616) x 255
    mean=[125.307, 122.961, 113.8575],
    std=[62.985, 62.0925, 66.708])
