# STL-10 with the report's pipeline (LeCT report, Appendix): ./cifar10.py with
# the STL-10 data and statistics and a RandomCrop(96, padding 4).
# lect_mm's STL10 reads data/stl10/stl10_binary/{train,test}_{X,y}.bin (the
# official binaries; 5,000 train / 8,000 test images). download=False: missing
# files raise; add `--cfg-options train_dataloader.dataset.download=True
# val_dataloader.dataset.download=True` to fetch and MD5-verify the archive.
_base_ = ['./cifar10.py']

dataset_type = 'STL10'
data_root = 'data/stl10'

data_preprocessor = dict(
    # RGB mean 0.5, std 0.5 x 255
    mean=[127.5, 127.5, 127.5],
    std=[127.5, 127.5, 127.5])

# cifar10.py's pipeline with 96x96 crops and RandAugment filling with the
# STL-10 mean.
train_pipeline = [
    dict(t, crop_size=96) if t['type'] == 'RandomCrop' else
    dict(t, hparams=dict(pad_val=[128, 128, 128]))
    if t['type'] == 'RandAugment' else t for t in _base_.train_pipeline
]

train_dataloader = dict(
    dataset=dict(
        type=dataset_type, data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(type=dataset_type, data_root=data_root))
test_dataloader = val_dataloader
