# CIFAR-10 with the report's pipeline (LeCT report, Appendix):
# RandomCrop(32, padding 4) + horizontal flip + RandAugment, then resize to
# 224; batch 64.
# CheckedCIFAR10 (lect_mm.datasets) reads data/cifar10/cifar-10-batches-py/,
# the official python pickles, as mmpretrain's CIFAR10 does, but first checks
# each file of the split (present, official byte size and MD5, 10,000 images)
# and names a missing, empty, truncated or altered one with its expected size.
# download=False: nothing is fetched; add `--cfg-options
# train_dataloader.dataset.download=True val_dataloader.dataset.download=True`
# to download and verify the archive.
dataset_type = 'CheckedCIFAR10'
data_root = 'data/cifar10'

data_preprocessor = dict(
    num_classes=10,
    # RGB mean (0.4914, 0.4822, 0.4465), std (0.2023, 0.1994, 0.2010) x 255
    mean=[125.307, 122.961, 113.8575],
    std=[51.5865, 50.847, 51.255],
    # the dataset holds RGB arrays already
    to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=32, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(
        type='RandAugment',
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[125, 123, 114])),
    dict(type='Resize', scale=224),
    dict(type='PackInputs'),
]

test_pipeline = [
    dict(type='Resize', scale=224),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=64,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        split='train',
        download=False,
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
        download=False,
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, 5))

test_dataloader = val_dataloader
test_evaluator = val_evaluator
