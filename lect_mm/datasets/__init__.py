from .cifar import CheckedCIFAR10, CheckedCIFAR100
from .digits import Digits
from .fashion_mnist import FashionMNISTIdx
from .stl10 import STL10

__all__ = [
    'CheckedCIFAR10', 'CheckedCIFAR100', 'Digits', 'FashionMNISTIdx', 'STL10'
]
