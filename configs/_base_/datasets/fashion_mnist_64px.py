# Fashion-MNIST for a 2-core CPU (the `cpu` protocol of
# tools/benchmark_accuracy.py): 64x64 input, the first 10,000 training images
# (about 1,000 per class), RandomCrop(padding 4) + horizontal flip (no
# RandAugment: the schedule is short); validation every epoch on the first
# 2,000 test images, testing on all 10,000. Batch 64, 2 workers.
_base_ = ['./fashion_mnist.py']

data_preprocessor = dict(
    _delete_=True,
    type='ClsDataPreprocessor',
    num_classes=10,
    mean=[72.94] * 3,
    std=[90.02] * 3,
    to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=28, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='Resize', scale=64),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='Resize', scale=64),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    num_workers=2,
    dataset=dict(indices=10000, pipeline=train_pipeline))
val_dataloader = dict(
    num_workers=2,
    dataset=dict(indices=2000, pipeline=test_pipeline))
test_dataloader = dict(
    batch_size=64,
    num_workers=2,
    persistent_workers=True,
    dataset=dict(
        type='FashionMNISTIdx',
        data_root='/usr/share/datasets/fashion-mnist',
        split='test',
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
