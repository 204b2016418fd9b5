"""Checkpoints of the LeCT author's reference layout -> lect_mm keys.

The reference code names its modules ``patch_embedI``, ``blocksI.J.{norm1,
leatt, norm2, leff}``, ``normI`` and ``head`` (I the 1-based stage, J the
block); :func:`convert_lect_ref` maps such a state dict onto
``ImageClassifier(backbone=LeCT, neck=GlobalAveragePooling,
head=LinearClsHead)``, as timm's ``checkpoint_filter_fn`` does for its models.
``tools/model_converters/lect_ref2mmpretrain.py`` is its command line.
"""
import re
from collections import OrderedDict
from typing import Dict, Optional

import torch

VARIANTS = ('v1', 'v2', 'v3')

# Reference name of the query upsampler's parts -> lect_mm submodule.
_UPSAMPLER_KEYS = {
    'v1': {'v_upsample.1.': 'query_upsampler.conv.',
           'v_upsample.2.': 'query_upsampler.norm.'},
    'v2': {'v_conv.': 'query_upsampler.conv.',
           'v_bn.': 'query_upsampler.norm.'},
    'v3': {'v_upsample.0.': 'query_upsampler.reduce.',
           'v_upsample.2.': 'query_upsampler.deconv.',
           'v_upsample.4.': 'query_upsampler.expand.'},
}
_ATTN_KEYS = ('proj_v.', 'conv1.', 'conv2.', 'conv3.', 'proj.')
_FFN_KEYS = ('conv1.', 'conv2.', 'conv3.', 'bn1.', 'bn2.', 'bn3.')


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f'Unknown variant {variant!r}; choose from '
                         f'{list(VARIANTS)}.')


def detect_variant(state_dict: Dict[str, torch.Tensor]) -> str:
    """Tell LeCT v1, v2 and v3 apart from reference keys and shapes.

    v2 has ``leatt.conv3`` / ``leatt.v_conv``; v3 a ConvTranspose (4-d
    weight) at ``leatt.v_upsample.2``; anything else is v1.
    """
    for key, value in state_dict.items():
        if '.leatt.conv3.' in key or '.leatt.v_conv.' in key:
            return 'v2'
        if key.endswith('.leatt.v_upsample.2.weight') and value.dim() == 4:
            return 'v3'
    return 'v1'


def convert_attention_key(key: str, variant: str) -> Optional[str]:
    """Map a key of one reference attention layer (the part after
    ``leatt.``) to the key of lect_mm's LeMSA / LeMSAv2.

    Args:
        key (str): E.g. ``'v_upsample.1.weight'``.
        variant (str): 'v1', 'v2' or 'v3'.

    Returns:
        str | None: E.g. ``'query_upsampler.conv.weight'``; None when the
        key has no counterpart in that variant.
    """
    _check_variant(variant)
    for old, new in _UPSAMPLER_KEYS[variant].items():
        if key.startswith(old):
            return new + key[len(old):]
    if key.startswith(_ATTN_KEYS) and (variant == 'v2'
                                       or not key.startswith('conv3.')):
        return key
    return None


def _convert_block_key(rest: str, variant: str) -> Optional[str]:
    """``norm1.* | leatt.* | norm2.* | leff.*`` -> LeCTBlock key."""
    if rest.startswith(('norm1.', 'norm2.')):
        return rest
    if rest.startswith('leff.'):
        sub = rest[len('leff.'):]
        return 'ffn.' + sub if sub.startswith(_FFN_KEYS) else None
    if rest.startswith('leatt.'):
        sub = convert_attention_key(rest[len('leatt.'):], variant)
        return None if sub is None else 'attn.' + sub
    return None


def reference_state_dict(checkpoint: dict) -> Dict[str, torch.Tensor]:
    """The state dict of a loaded reference checkpoint: ``checkpoint``
    itself, or its ``'state_dict'`` or ``'model'`` entry."""
    for wrapper in ('state_dict', 'model'):
        if isinstance(checkpoint.get(wrapper), dict):
            return checkpoint[wrapper]
    return checkpoint


def convert_lect_ref(state_dict: Dict[str, torch.Tensor],
                     variant: Optional[str] = None) -> 'OrderedDict':
    """Map a reference-layout LeCT state dict to lect_mm keys.

    ``patch_embedI.*`` -> ``backbone.stages.{I-1}.patch_embed.*``;
    ``blocksI.J.{norm1,norm2}`` -> ``backbone.stages.{I-1}.blocks.J.*``;
    ``leatt`` -> ``attn`` (see :func:`convert_attention_key`), ``leff`` ->
    ``ffn``; ``normI`` -> ``backbone.stages.{I-1}.norm``; ``head`` ->
    ``head.fc``. The tensors are not copied.

    Args:
        state_dict (dict): Reference-layout state dict.
        variant (str, optional): 'v1', 'v2' or 'v3'; detected when None
            (:func:`detect_variant`).

    Returns:
        OrderedDict: The state dict of ``ImageClassifier(backbone=LeCT,
        neck=GlobalAveragePooling, head=LinearClsHead)``.

    Raises:
        ValueError: On an unknown variant or any key that has no mapping.
    """
    if variant is None:
        variant = detect_variant(state_dict)
    _check_variant(variant)
    converted, unmapped = OrderedDict(), []
    for key, value in state_dict.items():
        new_key = None
        match = re.match(r'^(patch_embed|norm)(\d+)\.(.+)$', key)
        if match:
            part, stage, rest = match.groups()
            new_key = f'backbone.stages.{int(stage) - 1}.{part}.{rest}'
        elif key.startswith('head.'):
            new_key = 'head.fc.' + key[len('head.'):]
        else:
            match = re.match(r'^blocks(\d+)\.(\d+)\.(.+)$', key)
            if match:
                stage, block, rest = match.groups()
                inner = _convert_block_key(rest, variant)
                if inner is not None:
                    new_key = (f'backbone.stages.{int(stage) - 1}.blocks.'
                               f'{block}.{inner}')
        if new_key is None:
            unmapped.append(key)
        else:
            converted[new_key] = value
    if unmapped:
        raise ValueError(f'{len(unmapped)} key(s) of the LeCT {variant} '
                         f'reference layout have no mapping: {unmapped[:10]}')
    return converted
