# The report's schedule with base lr 6e-3 (its ResNet and ConvNeXt).
_base_ = './report_60e.py'

optim_wrapper = dict(optimizer=dict(lr=6e-3))
