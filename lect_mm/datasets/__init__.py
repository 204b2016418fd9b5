from .digits import Digits
from .stl10 import STL10

__all__ = ['Digits', 'STL10']
