# The report's schedule over 100 epochs with base lr 6e-3 (STL10 runs of its
# ResNet and ConvNeXt).
_base_ = './report_60e.py'

optim_wrapper = dict(optimizer=dict(lr=6e-3))
train_cfg = dict(max_epochs=100)
