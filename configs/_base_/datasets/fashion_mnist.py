# Fashion-MNIST (28x28 grey, 10 classes; 60,000 train / 10,000 test) with the
# LeCT report's pipeline (Appendix): RandomCrop(padding 4) + horizontal flip +
# RandAugment, then resize to 224 (on the device, ResizeClsDataPreprocessor,
# as in ./cifar10_device_resize.py); batch 64.
#
# FashionMNISTIdx reads the gzipped IDX files where
# `apt-get install -y dataset-fashion-mnist` puts them
# (/usr/share/datasets/fashion-mnist); it never downloads. Grey images enter
# the 3-channel models as three identical channels (channels=3), so the model
# configs are used unchanged.
dataset_type = 'FashionMNISTIdx'
data_root = '/usr/share/datasets/fashion-mnist'

# Fashion-MNIST's grey mean 0.2860 and std 0.3530 (x 255), on each channel.
data_preprocessor = dict(
    type='ResizeClsDataPreprocessor',
    size=224,
    mode='bilinear',
    num_classes=10,
    mean=[72.94] * 3,
    std=[90.02] * 3,
    to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=28, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(
        type='RandAugment',
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[73, 73, 73])),
    dict(type='PackInputs'),
]

test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=64,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        split='train',
        pipeline=train_pipeline),
    # augmentation seeded per (seed, epoch, sample): resume-exact whatever
    # the workers (lect_mm.datasets.SeededSampler).
    sampler=dict(type='SeededSampler', shuffle=True),
)

val_dataloader = dict(
    batch_size=64,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        split='test',
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, 5))

test_dataloader = val_dataloader
test_evaluator = val_evaluator
