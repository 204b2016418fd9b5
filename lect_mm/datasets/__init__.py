from .digits import Digits
from .fashion_mnist import FashionMNISTIdx
from .stl10 import STL10

__all__ = ['Digits', 'FashionMNISTIdx', 'STL10']
