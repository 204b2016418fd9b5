# LeViT-128S (mmpretrain LeViT)
# on STL10, 100 epochs, trained as in the LeCT report's Appendix
# (AdamW lr 1e-3, wd 0.05, batch 64, cosine, grad clip 5).
_base_ = [
    '../_base_/models/levit_128s.py',
    '../_base_/datasets/stl10.py',
    '../_base_/schedules/report_100e.py',
    '../_base_/default_runtime.py',
]
