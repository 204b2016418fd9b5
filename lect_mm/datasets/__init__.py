from .cifar import CheckedCIFAR10, CheckedCIFAR100
from .digits import Digits
from .stl10 import STL10

__all__ = ['CheckedCIFAR10', 'CheckedCIFAR100', 'Digits', 'STL10']
