from .cifar import CheckedCIFAR10, CheckedCIFAR100
from .digits import Digits
from .fashion_mnist import FashionMNISTIdx
from .samplers import SeededIndex, SeededPipeline, SeededSampler, seeded_rngs
from .stl10 import STL10

__all__ = [
    'CheckedCIFAR10', 'CheckedCIFAR100', 'Digits', 'FashionMNISTIdx', 'STL10',
    'SeededIndex', 'SeededPipeline', 'SeededSampler', 'seeded_rngs'
]
