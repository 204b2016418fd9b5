# A tiny classifier on 16x16 Digits for the engine and tool tests: the real
# runtime and schedule configs, a 2-block ResNet stage with drop path (torch
# RNG) and random flips (numpy RNG), so that resumption is put to the test;
# the training sampler is the shipped configs' SeededSampler.
_base_ = [
    '../../../configs/_base_/schedules/report_60e.py',
    '../../../configs/_base_/default_runtime.py',
]

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ResNet',
        depth=18,
        num_stages=1,
        strides=(1, ),
        dilations=(1, ),
        out_indices=(0, ),
        stem_channels=8,
        base_channels=8,
        drop_path_rate=0.2),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=8,
        loss=dict(type='CrossEntropyLoss')))

data_preprocessor = dict(
    num_classes=10, mean=[127.5] * 3, std=[127.5] * 3, to_rgb=False)
train_dataloader = dict(
    batch_size=16,
    num_workers=0,
    dataset=dict(
        type='Digits',
        split='train',
        image_size=16,
        indices=64,
        pipeline=[
            dict(type='RandomFlip', prob=0.5, direction='horizontal'),
            dict(type='PackInputs')
        ]),
    sampler=dict(type='SeededSampler', shuffle=True))
val_dataloader = dict(
    batch_size=32,
    num_workers=0,
    dataset=dict(
        type='Digits',
        split='val',
        image_size=16,
        indices=32,
        pipeline=[dict(type='PackInputs')]),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

train_cfg = dict(max_epochs=2)
default_hooks = dict(logger=dict(interval=1))
randomness = dict(seed=0, deterministic=True)
