from . import authors_weights  # noqa: F401  (the lect_mm+ checkpoint scheme)
from . import backbones  # noqa: F401  (registers the backbones)
from .data_preprocessor import ResizeClsDataPreprocessor  # noqa: F401
