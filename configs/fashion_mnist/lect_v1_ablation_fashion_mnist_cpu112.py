# LeCT (v1) ablation of the report's Table 3 (no convolutional skip, parallel
# q/k/v) on Fashion-MNIST at 112x112 (the `cpu112` protocol of
# tools/benchmark_accuracy.py).
_base_ = ['./lect_v1_fashion_mnist_cpu112.py']

model = dict(
    backbone=dict(attn_cfg=[
        dict(sr_ratio=None, pool_size=4, conv_skip=False, qkv_mode='parallel'),
        dict(sr_ratio=None, pool_size=4, conv_skip=False, qkv_mode='parallel'),
        dict(sr_ratio=None, pool_size=7, conv_skip=False, qkv_mode='parallel'),
    ]))
