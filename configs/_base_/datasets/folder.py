# Your own images, one folder per class (docs/custom_dataset.md):
#
#   <data_root>/train/<class name>/*.jpg (or .jpeg .png .ppm .bmp .pgm .tif)
#   <data_root>/val/<class name>/...
#
# CheckedCustomDataset (lect_mm.datasets) is mmpretrain's CustomDataset
# (classes = the sorted folder names, label = the folder's index) that names
# a missing, empty or undecodable image with its path; scan_images=True loads
# every image when the data set is built and names all bad files at once.
# metainfo=dict(classes=[...]) naming the folders in another order (e.g. a
# checkpoint's) labels each folder by its place in that list.
# Images of any size and mode (grey, RGBA, 16-bit are read as 8-bit BGR);
# the ImageNet pipeline at 224: random resized crop + flip for training,
# shorter side to 256 + centre crop for validation. A leaf config sets
# data_root (all three loaders) and num_classes (head and data_preprocessor).
dataset_type = 'CheckedCustomDataset'
data_root = 'data/my_images'

data_preprocessor = dict(
    num_classes=None,  # set to the number of class folders
    # ImageNet RGB mean and std (x 255); images are read as BGR
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    to_rgb=True)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=224),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]

train_dataloader = dict(
    batch_size=64,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        data_prefix='train',
        scan_images=False,
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
        data_prefix='val',
        scan_images=False,
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, ))

test_dataloader = val_dataloader
test_evaluator = val_evaluator
