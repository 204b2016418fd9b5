# LeViT-64S: LeViT-128S with widths (64/128/192) and head counts (2/3/4)
# halved, at the report's ~1-2M scale. 1,764,659 parameters (10 classes).
_base_ = ['./levit_128s.py']

model = dict(backbone=dict(arch='64s'), head=dict(in_channels=192))
