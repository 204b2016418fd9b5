# ViTAE at the report's ~1.2M scale (arch 'xs'), inputs resized to 224
# on CIFAR-10, 60 epochs, trained as in the LeCT report's Appendix
# (AdamW lr 1e-3, wd 0.05, batch 64, cosine, grad clip 5).
_base_ = [
    '../_base_/models/vitae_xs.py',
    '../_base_/datasets/cifar10.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]
