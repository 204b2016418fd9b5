# The LeCT author's ConvNeXt (`ConvNeXt.py`)
# on CIFAR-100, 60 epochs, trained as in the LeCT report's Appendix
# (AdamW lr 6e-3, wd 0.05, batch 64, cosine, grad clip 5).
_base_ = [
    '../_base_/models/convnext_report.py',
    '../_base_/datasets/cifar100.py',
    '../_base_/schedules/report_60e_lr6e-3.py',
    '../_base_/default_runtime.py',
]

model = dict(head=dict(num_classes=100))
