# CCT-7/3x1 (`cct_7_3x1_32`) at 32x32, with the report's schedule and
# augmentation (not CCT's own training recipe)
# on CIFAR-10, 60 epochs, trained as in the LeCT report's Appendix
# (AdamW lr 1e-3, wd 0.05, batch 64, cosine, grad clip 5).
_base_ = [
    '../_base_/models/cct_7_3x1.py',
    '../_base_/datasets/cifar10.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

# CCT runs at the native 32x32: drop the resize to 224 of the dataset
# pipelines (the lists replace the base ones wholesale).
train_pipeline = [t for t in _base_.train_pipeline if t['type'] != 'Resize']
test_pipeline = [t for t in _base_.test_pipeline if t['type'] != 'Resize']
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
