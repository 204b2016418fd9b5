# LeCT v3 on Fashion-MNIST at the training CPU time of LeCT (v1)'s 8 epochs
# under the `cpu` protocol (docs/results/fashion_mnist_cost.md): 8 epochs (the
# `cpu` protocol's), from 0.535 CPU s per step against LeCT's 0.549
# (tools/benchmark_accuracy.py --budget cpu-time, calibrated on this project's
# 2-core CPU; the cosine schedule spans these epochs).
_base_ = ['./lect_v3_fashion_mnist_cpu.py']
