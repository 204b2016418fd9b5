# CIFAR-100 (32×32) as in ./cifar100.py, but the resize to 224 runs on the
# device, batched, after normalisation (ResizeClsDataPreprocessor, bilinear,
# align_corners False) instead of in the CPU workers: the workers then augment,
# collate and transfer the small images only. Same images up to the CPU path's
# rounding to uint8 (see tests/test_models/test_data_preprocessor.py).
_base_ = ['./cifar100.py']

train_pipeline = [t for t in _base_.train_pipeline if t['type'] != 'Resize']
test_pipeline = [t for t in _base_.test_pipeline if t['type'] != 'Resize']

data_preprocessor = dict(
    type='ResizeClsDataPreprocessor', size=224, mode='bilinear')

train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
