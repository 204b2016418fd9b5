# The report's schedule over 100 epochs (its STL10 runs).
_base_ = './report_60e.py'

train_cfg = dict(max_epochs=100)
