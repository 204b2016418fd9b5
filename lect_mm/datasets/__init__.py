from .digits import Digits
from .samplers import SeededIndex, SeededPipeline, SeededSampler, seeded_rngs
from .stl10 import STL10

__all__ = [
    'Digits', 'STL10', 'SeededIndex', 'SeededPipeline', 'SeededSampler',
    'seeded_rngs'
]
