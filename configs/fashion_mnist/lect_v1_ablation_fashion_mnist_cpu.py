# The LeCT report's ablation (Table 3: LeCT v1 without the convolutional skip,
# q/k/v projected in parallel) on Fashion-MNIST for a 2-core CPU (the `cpu`
# protocol of tools/benchmark_accuracy.py): lect_v1_fashion_mnist_cpu.py with
# the ablated attention, so the two differ in the attention only.
_base_ = ['./lect_v1_fashion_mnist_cpu.py']

model = dict(
    backbone=dict(attn_cfg=[
        dict(sr_ratio=4, conv_skip=False, qkv_mode='parallel'),
        dict(sr_ratio=2, conv_skip=False, qkv_mode='parallel'),
        dict(sr_ratio=1, conv_skip=False, qkv_mode='parallel'),
    ]))
