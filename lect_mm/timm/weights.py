"""Checkpoints between lect_mm's mmpretrain models and their timm models.

A :class:`~lect_mm.timm.model.ZooTimmModel` names its parameters as the
mmpretrain ``ImageClassifier`` of the same config (``backbone.*``,
``head.fc.*``; LeViT ``head.head.{bn,linear}.*``), so the state dicts are the
same in both directions. :func:`checkpoint_filter_fn` is what timm applies
to a checkpoint before loading it (``pretrained=True``,
``timm.models.load_checkpoint(..., filter_fn=...)``): it takes a checkpoint
of ``tools/train.py`` (the state dict under ``'state_dict'``), the bare
state dict of either model, or a LeCT checkpoint of the LeCT author's
reference layout (converted by
:func:`lect_mm.models.convert.convert_lect_ref`).
"""
from typing import Dict

import torch

from lect_mm.models.convert import convert_lect_ref

#: Prefixes of what an mmpretrain model saves beside its layers.
_DROPPED = ('data_preprocessor.', )
#: Wrappers of a model's keys: DDP and torch.compile.
_WRAPPERS = ('module.', '_orig_mod.')


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor],
                         model=None) -> Dict[str, torch.Tensor]:
    """A checkpoint of the zoo -> the state dict of its timm model.

    Args:
        state_dict (dict): A loaded checkpoint: a state dict, or a dict
            holding one under ``'state_dict'`` (lect_mm, mmengine) or
            ``'model'``.
        model (nn.Module, optional): The model it is for (timm passes it).

    Returns:
        dict: The state dict, without wrapper prefixes and the
        data preprocessor's entries.
    """
    for wrapper in ('state_dict', 'model'):
        if isinstance(state_dict.get(wrapper), dict):
            state_dict = state_dict[wrapper]
            break
    out = {}
    for key, value in state_dict.items():
        while key.startswith(_WRAPPERS):
            key = key.split('.', 1)[1]
        if not key.startswith(_DROPPED):
            out[key] = value
    if out and not any(k.startswith('backbone.') for k in out):
        backbone = type(getattr(model, 'backbone', None)).__name__
        if model is not None and backbone != 'LeCT':
            raise ValueError(
                'The checkpoint has no backbone.* key of a lect_mm '
                f'classifier for {backbone}; its first keys: '
                f'{list(out)[:5]}.')
        # the LeCT author's reference layout
        out = dict(convert_lect_ref(out))
    return out
