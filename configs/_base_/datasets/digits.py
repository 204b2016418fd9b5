# The embedded demo data: scikit-learn's handwritten digits as 32x32 RGB
# images (lect_mm.datasets.Digits; 1,438 train / 359 val, no download).
# Light augmentation only: a padded random crop, no flip (digits are not
# mirror-symmetric), no resize.
dataset_type = 'Digits'

data_preprocessor = dict(
    num_classes=10,
    # mean and std of the train split (grey, repeated over the 3 channels)
    mean=[77.97, 77.97, 77.97],
    std=[82.64, 82.64, 82.64],
    # the dataset holds RGB arrays already
    to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=32, padding=2),
    dict(type='PackInputs'),
]

test_pipeline = [
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=64,
    num_workers=2,
    persistent_workers=True,
    dataset=dict(
        type=dataset_type, split='train', image_size=32,
        pipeline=train_pipeline),
    # augmentation seeded per (seed, epoch, sample): resume-exact whatever
    # the workers (lect_mm.datasets.SeededSampler).
    sampler=dict(type='SeededSampler', shuffle=True),
)

val_dataloader = dict(
    batch_size=64,
    num_workers=2,
    persistent_workers=True,
    dataset=dict(
        type=dataset_type, split='val', image_size=32,
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, 5))

test_dataloader = val_dataloader
test_evaluator = val_evaluator
