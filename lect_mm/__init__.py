"""lect_mm: LeCT and hybrid CNN/Transformer blocks for OpenMMLab.

Importing this package registers every block, backbone, dataset and engine
component into mmpretrain's registries (``default_scope='mmpretrain'``), and
the configs' names from ``model-index.yml`` with mmpretrain's model hub
(``mmpretrain.get_model('lect-v3_stl10')``, see :mod:`lect_mm.model_index`).
"""
import warnings

from ._warnings import silence_known_log_messages, silence_known_warnings

silence_known_warnings()

from .version import __version__  # noqa: E402
from . import engine  # noqa: E402,F401  (patches + registered engine parts)
from . import blocks  # noqa: E402,F401
from . import models  # noqa: E402,F401
from . import datasets  # noqa: E402,F401
from .model_index import register_model_index  # noqa: E402

try:
    register_model_index()
except FileNotFoundError as e:  # the registries above still work
    warnings.warn(f'lect_mm model names are not registered: {e}')

__all__ = ['__version__', 'silence_known_log_messages']
