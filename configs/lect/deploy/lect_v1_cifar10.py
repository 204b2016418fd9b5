# LeCT (v1) on CIFAR-10 for inference: every conv → BatchNorm pair folded
# (LeCT.switch_to_deploy), as mmpretrain's configs/levit/deploy. Test a
# checkpoint converted by mmpretrain's reparameterize_model.py with it
# (configs/lect/README.md, "Deploy").
_base_ = '../lect_v1_cifar10.py'

model = dict(backbone=dict(deploy=True))
