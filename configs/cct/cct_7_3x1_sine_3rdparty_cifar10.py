# CCT-7/3x1 with a fixed sinusoidal position embedding (`cct_7_3x1_32_sine`),
# the model of the CCT authors' sine CIFAR-10 weights (1,500 and 5,000
# epochs; 97.48 % and 98.00 % top-1 as their README reports, Apache-2.0),
# with their test-time normalisation.
_base_ = ['./cct_7_3x1_3rdparty_cifar10.py']

model = dict(backbone=dict(positional_embedding='sine'))
