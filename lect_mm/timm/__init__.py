"""The zoo as timm models: ``import lect_mm.timm``, then
``timm.create_model('lect_v1', num_classes=..., in_chans=...)``.

Importing this package (never done by ``import lect_mm``) registers the zoo's
names with timm (:data:`~lect_mm.timm.zoo.ZOO`), each building the model of
one config under ``configs/_base_/models/`` as a
:class:`~lect_mm.timm.model.ZooTimmModel`: the zoo's backbone class, the
config's pooling and head, the mmpretrain model's parameter names. It needs
the ``timm`` extra (``pip install lect_mm[timm]``). See ``docs/timm.md``.
"""
try:
    import timm  # noqa: F401
except ImportError as e:  # pragma: no cover
    raise ImportError(
        'lect_mm.timm needs timm: pip install "lect_mm[timm]" (timm, '
        'safetensors, segmentation-models-pytorch).') from e

import lect_mm  # noqa: E402,F401  (registers the backbones)
from .model import ZooTimmModel  # noqa: E402
from .weights import checkpoint_filter_fn  # noqa: E402
from .zoo import (TAGS, ZOO, config_path, first_conv,  # noqa: E402
                  mmpretrain_name, model_args, model_cfg, register_zoo,
                  takes_img_size)

register_zoo()

__all__ = [
    'TAGS', 'ZOO', 'ZooTimmModel', 'checkpoint_filter_fn', 'config_path',
    'first_conv', 'mmpretrain_name', 'model_args', 'model_cfg',
    'takes_img_size'
]
