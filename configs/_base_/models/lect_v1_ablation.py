# Ablation of the LeCT report (Table 3): LeCT (v1) without the convolutional
# skip and with independent (parallel) q/k projections from v instead of
# the sequential chain. Same parameter count as LeCT v1.
_base_ = ['./lect_v1.py']

model = dict(
    backbone=dict(attn_cfg=dict(conv_skip=False, qkv_mode='parallel')))
