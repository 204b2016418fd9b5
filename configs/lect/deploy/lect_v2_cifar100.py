# LeCT v2 on CIFAR-100 for inference: every conv → BatchNorm pair folded
# (LeCT.switch_to_deploy), as mmpretrain's configs/levit/deploy. Test a
# checkpoint converted by mmpretrain's reparameterize_model.py with it
# (configs/lect/README.md, "Deploy").
_base_ = '../lect_v2_cifar100.py'

model = dict(backbone=dict(deploy=True))
