# The report's main comparison on the demo data: the LeCT v1 network of
# lect_digits.py with plain multi-head self-attention instead of LeMSA in
# every block (same patch embeddings, LeFFN, norms and schedule).
#
#   python tools/train.py configs/demo/lect_msa_digits.py
_base_ = ['./lect_digits.py']

model = dict(
    backbone=dict(
        attn_cfg=dict(_delete_=True, type='MultiheadSelfAttention')))
