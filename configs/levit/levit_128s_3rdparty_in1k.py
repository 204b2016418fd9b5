# LeViT-128S with FAIR's ImageNet-1k weights (facebookresearch/LeViT,
# distilled from a RegNetY-16GF teacher; 76.6 % top-1 as their README
# reports, Apache-2.0): FlexibleLeViT '128s' with the official distillation
# head (LeViTClsHead, distillation=True: the mean of its two classifiers;
# mmpretrain cannot train it) on mmpretrain's ImageNet pipeline (resize the
# short side to 256, bicubic; centre crop 224). `get_model(
# 'flexible-levit-128s_3rdparty_in1k', pretrained=True)` loads the weights,
# converted on load (model-index `Weights: lect_mm+URL`).
_base_ = [
    '../_base_/models/levit_128s.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    '../_base_/schedules/report_60e.py',
    '../_base_/default_runtime.py',
]

model = dict(head=dict(num_classes=1000, distillation=True))
train_dataloader = dict(sampler=dict(type='SeededSampler', shuffle=True))
