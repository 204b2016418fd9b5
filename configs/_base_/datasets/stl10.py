# STL-10 with the report's pipeline (Appendix, SPEC §8): RandomCrop(96,
# padding 4) + horizontal flip + RandAugment, then resize to 224; batch 64.
# lect_mm's STL10 reads data/stl10/stl10_binary/{train,test}_{X,y}.bin (the
# official binaries; 5,000 train / 8,000 test images). download=False: missing
# files raise; add `--cfg-options train_dataloader.dataset.download=True
# val_dataloader.dataset.download=True` to fetch and MD5-verify the archive.
dataset_type = 'STL10'
data_root = 'data/stl10'

data_preprocessor = dict(
    num_classes=10,
    # RGB mean 0.5, std 0.5 x 255
    mean=[127.5, 127.5, 127.5],
    std=[127.5, 127.5, 127.5],
    # the dataset holds RGB arrays already
    to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=96, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(
        type='RandAugment',
        policies='timm_increasing',
        num_policies=2,
        total_level=10,
        magnitude_level=9,
        magnitude_std=0.5,
        hparams=dict(pad_val=[128, 128, 128])),
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
    sampler=dict(type='DefaultSampler', shuffle=True),
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
