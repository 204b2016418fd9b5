from .cifar import CheckedCIFAR10, CheckedCIFAR100
from .digits import Digits
from .fashion_mnist import FashionMNISTIdx
from .folder import CheckedCustomDataset, ImageFileError, image_file_problem
from .samplers import SeededIndex, SeededPipeline, SeededSampler, seeded_rngs
from .stl10 import STL10

__all__ = [
    'CheckedCIFAR10', 'CheckedCIFAR100', 'CheckedCustomDataset', 'Digits',
    'FashionMNISTIdx', 'ImageFileError', 'STL10', 'SeededIndex',
    'SeededPipeline', 'SeededSampler', 'image_file_problem', 'seeded_rngs'
]
