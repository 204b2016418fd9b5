from .alternet import AlterNet
from .base_backbone import HeadPool, StageTap, ZooBackbone
from .cct import CCT
from .ceit import CeiT
from .lect import LeCT
from .levit import FlexibleLeViT
from .narrow_resnet import NarrowResNet
from .vitae import ViTAE

__all__ = ['AlterNet', 'FlexibleLeViT', 'NarrowResNet', 'LeCT', 'CCT', 'CeiT',
           'ViTAE', 'ZooBackbone', 'StageTap', 'HeadPool']
