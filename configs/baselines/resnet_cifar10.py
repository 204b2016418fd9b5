# The LeCT author's ResNet (`ResNet.py`)
# on CIFAR-10, 60 epochs, trained as in the LeCT report's Appendix
# (AdamW lr 6e-3, wd 0.05, batch 64, cosine, grad clip 5).
_base_ = [
    '../_base_/models/resnet_report.py',
    '../_base_/datasets/cifar10.py',
    '../_base_/schedules/report_60e_lr6e-3.py',
    '../_base_/default_runtime.py',
]
