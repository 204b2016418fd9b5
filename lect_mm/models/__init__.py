from . import backbones  # noqa: F401  (registers the backbones)
