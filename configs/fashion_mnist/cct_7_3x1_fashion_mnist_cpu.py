# CCT-7/3x1 on Fashion-MNIST with the `cpu` protocol's data and schedule
# (tools/benchmark_accuracy.py) at CCT's native 32x32 (1.19 GFLOPs per image,
# about 8 training images/s on the 2-core CPU: the protocol leaves it out of
# its default set).
_base_ = [
    '../_base_/models/cct_7_3x1.py',
    '../_base_/datasets/fashion_mnist_64px.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

train_cfg = dict(max_epochs=8)

# The 64px base pipelines with the resize to 32 instead.
train_pipeline = [
    dict(type='RandomCrop', crop_size=28, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='Resize', scale=32),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='Resize', scale=32), dict(type='PackInputs')]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
