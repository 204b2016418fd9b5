"""The backbones' authors' published weights through mmengine's checkpoint
loader, converted on load.

``lect_mm+URL`` (or ``lect_mm+PATH``) names a classifier checkpoint in the
layout of a zoo backbone's authors (SHI-Labs' CCT, FAIR's LeViT, the LeCT
author's reference code). mmengine's ``CheckpointLoader`` reads ``URL`` or
``PATH`` as it reads any checkpoint, then
:meth:`~lect_mm.models.backbones.ZooBackbone.convert_foreign` of the backbone
whose layout it is gives the mmpretrain ``ImageClassifier``'s state dict.
The model index's ``Weights`` of the authors' weights use it, so that
``mmpretrain.get_model(name, pretrained=True)`` loads them converted;
mmpretrain's ``url_mapping=('https://.*/', 'DIR/')`` reads them from a
folder instead. ``import lect_mm`` registers the prefix; it adds a scheme
and changes none of mmengine's.
"""
from urllib.error import URLError

from mmengine.runner.checkpoint import CheckpointLoader

from .backbones import ZooBackbone

#: The prefix of a checkpoint in an authors' layout, converted on load.
PREFIX = 'lect_mm+'


@CheckpointLoader.register_scheme(prefixes=r'lect_mm\+')
def load_from_authors(filename: str, map_location=None) -> dict:
    """Read ``lect_mm+SOURCE`` with mmengine's loader for ``SOURCE`` and
    convert it (see the module's docstring).

    Returns:
        dict: ``{'state_dict': ...}`` of an mmpretrain ``ImageClassifier``.
    """
    source = filename[len(PREFIX):]
    try:
        checkpoint = CheckpointLoader.load_checkpoint(source, map_location)
    except URLError as e:
        raise RuntimeError(
            f'Could not download {source} ({e.reason}). Without network, '
            'download it elsewhere and load the file converted: '
            f"get_model(name, pretrained='{PREFIX}/path/to/FILE.pth'), or "
            "get_model(name, pretrained=True, url_mapping=('https://.*/', "
            "'/path/to/folder/')).") from e
    state_dict = checkpoint
    for wrapper in ('model', 'state_dict'):
        if isinstance(checkpoint.get(wrapper), dict):
            state_dict = checkpoint[wrapper]
            break
    cls = ZooBackbone.foreign_layout_of(state_dict)
    if cls is None:
        layouts = [
            c.FOREIGN_LAYOUT for c in ZooBackbone.zoo_classes()
            if c.FOREIGN_LAYOUT
        ]
        raise ValueError(f'{source} is in none of the layouts lect_mm '
                         f'converts ({"; ".join(sorted(layouts))}); its '
                         f'first keys: {list(state_dict)[:5]}.')
    return {'state_dict': cls.convert_foreign(state_dict)}
