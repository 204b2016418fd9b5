from .lect import LeCT
from .alternet import AlterNet
from .levit import FlexibleLeViT
from .narrow_resnet import NarrowResNet
from .cct import CCT
from .ceit import CeiT
from .vitae import ViTAE
__all__ = ['AlterNet', 'FlexibleLeViT', 'NarrowResNet', 'LeCT', 'CCT', 'CeiT',
           'ViTAE']
