from . import backbones  # noqa: F401  (registers the backbones)
from .data_preprocessor import ResizeClsDataPreprocessor  # noqa: F401
