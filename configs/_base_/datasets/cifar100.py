# CIFAR-100 with the report's pipeline (LeCT report, Appendix): ./cifar10.py
# with the CIFAR-100 data, statistics and RandAugment fill.
# CheckedCIFAR100 reads data/cifar100/cifar-100-python/ (the official python
# pickles: train 50,000 and test 10,000 images), each file checked as in
# ./cifar10.py; download=False as there.
_base_ = ['./cifar10.py']

dataset_type = 'CheckedCIFAR100'
data_root = 'data/cifar100'

data_preprocessor = dict(
    num_classes=100,
    # RGB mean (0.5071, 0.4867, 0.4408), std (0.2675, 0.2565, 0.2761) x 255
    mean=[129.3105, 124.1085, 112.404],
    std=[68.2125, 65.4075, 70.4055])

# cifar10.py's pipeline with RandAugment filling with the CIFAR-100 mean.
train_pipeline = [
    dict(t, hparams=dict(pad_val=[129, 124, 112]))
    if t['type'] == 'RandAugment' else t for t in _base_.train_pipeline
]

train_dataloader = dict(
    dataset=dict(
        type=dataset_type, data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(type=dataset_type, data_root=data_root))
test_dataloader = val_dataloader
