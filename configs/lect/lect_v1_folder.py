# LeCT (v1) on your own images, one folder per class (docs/custom_dataset.md):
#
#   data/my_images/train/<class name>/*.jpg    (.jpeg .png .bmp .ppm .pgm .tif)
#   data/my_images/val/<class name>/*.jpg
#
# Set data_root and num_classes (the number of class folders: a wrong value
# stops the run before the first iteration, naming the right one) here or in
# a config of your own next to this one (`_base_ = './lect_v1_folder.py'`,
# then the lines below), and run `python tools/train.py CONFIG`. Every
# split must have the same class folders. 224x224 input, the LeCT report's
# schedule (AdamW lr 1e-3, batch 64, cosine decay over 60 epochs).
_base_ = [
    '../_base_/models/lect_v1.py',
    '../_base_/datasets/folder.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

data_root = 'data/my_images'
num_classes = 10

model = dict(head=dict(num_classes=num_classes))
data_preprocessor = dict(num_classes=num_classes)
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
