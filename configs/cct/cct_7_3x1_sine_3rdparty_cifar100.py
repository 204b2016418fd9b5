# CCT-7/3x1 with a fixed sinusoidal position embedding
# (`cct_7_3x1_32_sine_c100`), the model of the CCT authors' sine CIFAR-100
# weights (1,500 and 5,000 epochs; 82.72 % and 82.87 % top-1 as their README
# reports, Apache-2.0), with their test-time normalisation.
_base_ = ['./cct_7_3x1_3rdparty_cifar100.py']

model = dict(backbone=dict(positional_embedding='sine'))
