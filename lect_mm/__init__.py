"""lect_mm: LeCT and hybrid CNN/Transformer blocks for OpenMMLab.

Importing this package registers components and changes nothing else: every
block, backbone, dataset and engine part goes into mmpretrain's registries
(``default_scope='mmpretrain'``), child registries of scope ``lect_mm`` are
added (for configs that inherit ``lect_mm::...`` bases), mmengine's package
table learns the ``lect_mm::`` prefix, and the configs' names from
``model-index.yml`` are registered with mmpretrain's model hub
(``mmpretrain.get_model('lect-v3_stl10')``, see :mod:`lect_mm.model_index`).
What a run of lect_mm's tools or configs adds (checkpoint verification,
strict loading, the work-dir lock, ...) comes with its runtime config
(``configs/_base_/default_runtime.py``), not with this import.
"""
import warnings

from .version import __version__

with warnings.catch_warnings():
    # mmcv-lite has no compiled ops; mmcv's transformer bricks say so once,
    # when first imported. lect_mm uses no mmcv.ops.
    warnings.filterwarnings(
        'ignore', message='Fail to import ``MultiScaleDeformableAttention``')
    import mmcv.cnn.bricks.transformer  # noqa: F401

from . import registry  # noqa: E402,F401  (lect_mm scope, lect_mm::)
from . import engine  # noqa: E402,F401  (registered engine parts)
from . import blocks  # noqa: E402,F401
from . import models  # noqa: E402,F401
from . import datasets  # noqa: E402,F401
from .model_index import register_model_index  # noqa: E402

try:
    register_model_index()
except FileNotFoundError as e:  # the registries above still work
    warnings.warn(f'lect_mm model names are not registered: {e}')

__all__ = ['__version__']
