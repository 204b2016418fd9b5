"""Argument helpers of the backbones in ``lect_mm.models.backbones``.

A backbone file does not import another backbone file; the contract they
share is :class:`~lect_mm.models.backbones.base_backbone.ZooBackbone`, and
the helpers it and the backbones check their arguments with live here.
"""
import copy
from typing import Iterable, List, Mapping, Optional, Sequence, Union

import torch.nn as nn

from lect_mm.blocks.utils import check_choice

Freezable = Optional[Union[nn.Module, nn.Parameter]]


def parse_arch(arch: Union[str, dict],
               arch_zoo: Mapping[str, dict],
               essential_keys: Iterable[str],
               per_stage_keys: Iterable[str] = ()) -> dict:
    """Look an arch name up in ``arch_zoo``, or check a custom arch dict.

    Args:
        arch (str | dict): A key of ``arch_zoo`` or a full arch dict.
        arch_zoo (Mapping[str, dict]): The backbone's variants.
        essential_keys (Iterable[str]): Keys a custom dict must have.
        per_stage_keys (Iterable[str]): Keys holding one entry per stage;
            those present must all have the length of the first present
            (see :func:`check_per_stage`). Defaults to ``()``.

    Returns:
        dict: A deep copy of the arch settings, safe to modify.
    """
    if isinstance(arch, str):
        if arch not in arch_zoo:
            raise ValueError(f'Unavailable arch {arch!r}, choose from '
                             f'{sorted(arch_zoo)} or pass a dict.')
        arch = arch_zoo[arch]
    elif not isinstance(arch, dict):
        raise TypeError('arch must be a str or a dict, got '
                        f'{type(arch).__name__}.')
    else:
        essential_keys = list(essential_keys)
        missing = [k for k in essential_keys if k not in arch]
        if missing:
            raise ValueError(f'Custom arch needs the keys {essential_keys}; '
                             f'missing {missing}.')
    arch = copy.deepcopy(dict(arch))
    check_per_stage(
        {f'arch[{k!r}]': arch[k]
         for k in per_stage_keys if k in arch})
    return arch


def check_per_stage(lists: Mapping[str, Sequence],
                    num_stages: Optional[int] = None) -> int:
    """Check that per-stage settings have one entry per stage.

    Args:
        lists (Mapping[str, Sequence]): Settings by the name the error
            message gives them, e.g. ``{"arch['depths']": (2, 2)}``.
        num_stages (int, optional): The number of stages; None takes the
            length of the first setting. Defaults to None.

    Returns:
        int: The number of stages.
    """
    for name, value in lists.items():
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise TypeError(f'{name} must be a list with one entry per '
                            f'stage, got {value!r}.')
    if not lists:
        return num_stages
    if num_stages is None:
        reference, first = next(iter(lists.items()))
        num_stages = len(first)
        expected = f'{reference} has {num_stages}'
    else:
        expected = f'there are {num_stages} stages'
    for name, value in lists.items():
        if len(value) != num_stages:
            raise ValueError(
                f'{name} has length {len(value)}, but {expected}: per-stage '
                'settings need one entry per stage.')
    return num_stages


def parse_out_indices(out_indices: Union[int, Sequence[int]],
                      num_layers: int,
                      unit: str = 'layers') -> List[int]:
    """Normalise ``out_indices`` to a sorted list of non-negative indices.

    Args:
        out_indices (int | Sequence[int]): Indices of the outputs; negative
            ones count from the end.
        num_layers (int): How many layers (blocks, stages) there are.
        unit (str): What the layers are called in the error message.
            Defaults to ``'layers'``.

    Returns:
        list[int]: The indices in ``[0, num_layers)``, sorted, without
        repeats.
    """
    if isinstance(out_indices, int):
        out_indices = [out_indices]
    if not isinstance(out_indices, Sequence):
        raise TypeError('out_indices must be an int or a sequence, got '
                        f'{type(out_indices)}')
    parsed = []
    for index in out_indices:
        i = index + num_layers if index < 0 else index
        if not 0 <= i < num_layers:
            raise ValueError(f'Invalid out_indices {index} for '
                             f'{num_layers} {unit}')
        parsed.append(i)
    return sorted(set(parsed))


def parse_pooled_out(out_type: str,
                     out_types: Sequence[str],
                     out_indices: Union[int, Sequence[int]],
                     num_layers: int,
                     unit: str = 'layers') -> List[int]:
    """Check ``out_type`` and ``out_indices`` of a backbone with a pooled
    output (CCT's SeqPool, CeiT's LCA or average pooling).

    Args:
        out_type (str): One of ``out_types``; ``'pooled'`` exists only
            after the last layer.
        out_types (Sequence[str]): The backbone's output types.
        out_indices (int | Sequence[int]): Layers to output
            (:func:`parse_out_indices`).
        num_layers (int): How many layers there are.
        unit (str): What the layers are called in the error messages.
            Defaults to ``'layers'``.

    Returns:
        list[int]: ``out_indices`` as :func:`parse_out_indices` returns it.
    """
    check_choice(out_type, out_types, 'out_type')
    parsed = parse_out_indices(out_indices, num_layers, unit)
    if out_type == 'pooled' and parsed != [num_layers - 1]:
        one = unit[:-1] if unit.endswith('s') else unit
        raise ValueError(
            f"out_type='pooled' exists only after the last {one} "
            f'(out_indices=-1); got {out_indices}. Use '
            f"out_type='featmap' for intermediate {unit}.")
    return parsed


# The stems of the ResNet-like backbones (AlterNet, NarrowResNet): a 7x7
# stride-2 convolution and a 3x3 max-pool (ImageNet), or a 3x3 stride-1
# convolution (CIFAR).
STEM_TYPES = ('conv7x7', 'conv3x3')


# The one meaning of ``frozen_stages``, in ZooBackbone's docstring (a test
# checks it): mmpretrain's ResNet and PoolFormer rule, which its ViT and
# ConvNeXt share for k >= 1.
FROZEN_STAGES_DOC = (
    '-1 freezes nothing; k >= 0 freezes the stem and stages 0..k-1, each '
    'with its output norm (no gradients, eval mode), so k = num_stages '
    'freezes the whole backbone.')


# The default ``init_cfg`` of the token backbones (CCT, CeiT, ViTAE, LeCT),
# as in their references and mmpretrain's VisionTransformer: trunc-normal
# (std 0.02, bias 0) Linear layers and unit LayerNorms. BaseModule keeps a
# deep copy, so the list is never modified.
TRUNC_NORMAL_INIT_CFG = [
    dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
    dict(type='Constant', layer='LayerNorm', val=1., bias=0.),
]


def check_frozen_stages(frozen_stages: int, num_stages: int) -> int:
    """Return ``frozen_stages`` if it is an int in ``[-1, num_stages]``.

    Args:
        frozen_stages (int): The backbone's ``frozen_stages`` argument
            (:data:`FROZEN_STAGES_DOC`).
        num_stages (int): The backbone's number of stages.

    Returns:
        int: ``frozen_stages``, unchanged.
    """
    if not isinstance(frozen_stages, int) or isinstance(
            frozen_stages, bool) or not -1 <= frozen_stages <= num_stages:
        raise ValueError(f'frozen_stages must be in [-1, {num_stages}] (an '
                         f'int; -1 freezes nothing), got {frozen_stages!r}.')
    return frozen_stages


def is_pretrained(init_cfg: Union[dict, List[dict], None]) -> bool:
    """Whether ``init_cfg`` loads a checkpoint (a ``'Pretrained'`` entry).

    Backbones skip their own ``init_weights`` extras (positional
    embeddings, zero-init residuals) then, as mmpretrain's ResNet does.
    """
    cfgs = init_cfg if isinstance(init_cfg, list) else [init_cfg]
    return any(
        isinstance(cfg, dict) and cfg.get('type') == 'Pretrained'
        for cfg in cfgs)


def freeze(*items: Freezable) -> None:
    """Freeze what a backbone's ``_freeze_stages`` names.

    A module is put in eval mode and its parameters stop taking gradients;
    a bare parameter (a positional embedding, a class token) stops taking
    gradients; None (a part the backbone did not build) is skipped.

    Args:
        *items (nn.Module | nn.Parameter | None): What to freeze.
    """
    for item in items:
        if item is None:
            continue
        if isinstance(item, nn.Parameter):
            item.requires_grad = False
            continue
        item.eval()
        for param in item.parameters():
            param.requires_grad = False
