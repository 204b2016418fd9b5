"""lect_mm: LeCT and hybrid CNN/Transformer blocks for OpenMMLab.

Importing this package registers every block, backbone, dataset and engine
component into mmpretrain's registries (``default_scope='mmpretrain'``).
"""
from ._warnings import silence_known_log_messages, silence_known_warnings

silence_known_warnings()

from .version import __version__  # noqa: E402
from . import engine  # noqa: E402,F401  (patches + registered engine parts)
from . import blocks  # noqa: E402,F401
from . import models  # noqa: E402,F401
from . import datasets  # noqa: E402,F401

__all__ = ['__version__', 'silence_known_log_messages']
