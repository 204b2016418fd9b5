# Fashion-MNIST at 112x112 for a 2-core CPU (the `cpu112` protocol of
# tools/benchmark_accuracy.py): the `cpu` protocol's data (the first 10,000
# training images, RandomCrop(padding 4) + flip, validation on the first 2,000
# test images, testing on all 10,000) resized to 112 instead of 64.
_base_ = ['./fashion_mnist_64px.py']

# the pipelines are replaced whole, and so are the loaders' references to them

train_pipeline = [
    dict(type='RandomCrop', crop_size=28, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='Resize', scale=112),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='Resize', scale=112),
    dict(type='PackInputs'),
]

train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = dict(dataset=dict(pipeline=test_pipeline))
