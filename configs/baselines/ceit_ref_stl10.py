# CeiT as published by the LeCT author (`CeiT(GAP).py`: class token + LCA)
# on STL10, 100 epochs, trained as in the LeCT report's Appendix
# (AdamW lr 1e-3, wd 0.05, batch 64, cosine, grad clip 5).
_base_ = [
    '../_base_/models/ceit_ref.py',
    '../_base_/datasets/stl10.py',
    '../_base_/schedules/report_100e.py',
    '../_base_/default_runtime.py',
]
