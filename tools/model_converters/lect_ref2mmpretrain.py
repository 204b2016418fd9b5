"""Convert a LeCT checkpoint of the author's reference layout to lect_mm.

Usage::

    python tools/model_converters/lect_ref2mmpretrain.py SRC DST \\
        [--variant v1|v2|v3] [--config CONFIG]

SRC holds a state dict with the reference keys (SPEC §7: ``patch_embedI``,
``blocksI.J.{norm1,leatt,norm2,leff}``, ``normI``, ``head``), either plain or
under ``'model'`` / ``'state_dict'``; it is read with
``torch.load(weights_only=True)``. The variant is detected from the keys
(v2: ``leatt.conv3`` / ``leatt.v_conv``; v3: a ConvTranspose at
``leatt.v_upsample.2``; v1 otherwise) unless ``--variant`` is given.

The converted state dict is checked by loading it with ``strict=True`` into
the model of ``--config`` (default: LeCT of the detected variant with a
``LinearClsHead`` sized from ``head.weight``); any missing or unexpected key
is an error. DST is an mmengine checkpoint ``{'state_dict', 'meta'}`` that
``mmpretrain.get_model(config, pretrained=DST)`` and ``tools/test.py`` load.
"""
import argparse
import re
from collections import OrderedDict
from pathlib import Path
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


def detect_variant(state_dict: Dict[str, torch.Tensor]) -> str:
    """Tell LeCT v1, v2 and v3 apart from reference keys and shapes."""
    for key, value in state_dict.items():
        if '.leatt.conv3.' in key or '.leatt.v_conv.' in key:
            return 'v2'
        if key.endswith('.leatt.v_upsample.2.weight') and value.dim() == 4:
            return 'v3'
    return 'v1'


def _map_block_key(rest: str, variant: str) -> Optional[str]:
    """``norm1.* | leatt.* | norm2.* | leff.*`` -> lect_mm block key."""
    if rest.startswith(('norm1.', 'norm2.')):
        return rest
    if rest.startswith('leff.'):
        sub = rest[len('leff.'):]
        return 'ffn.' + sub if sub.startswith(_FFN_KEYS) else None
    if rest.startswith('leatt.'):
        sub = rest[len('leatt.'):]
        for old, new in _UPSAMPLER_KEYS[variant].items():
            if sub.startswith(old):
                return 'attn.' + new + sub[len(old):]
        if sub.startswith(_ATTN_KEYS) and (variant == 'v2'
                                           or not sub.startswith('conv3.')):
            return 'attn.' + sub
    return None


def convert_lect(state_dict: Dict[str, torch.Tensor],
                 variant: Optional[str] = None) -> 'OrderedDict':
    """Map a reference-layout LeCT state dict to lect_mm keys.

    ``patch_embedI.*`` -> ``backbone.stages.{I-1}.patch_embed.*``;
    ``blocksI.J.{norm1,norm2}`` -> ``backbone.stages.{I-1}.blocks.J.*``;
    ``leatt`` -> ``attn`` (query upsampler parts renamed per variant, see
    ``_UPSAMPLER_KEYS``), ``leff`` -> ``ffn``; ``normI`` ->
    ``backbone.stages.{I-1}.norm``; ``head`` -> ``head.fc``.

    Args:
        state_dict (dict): Reference-layout state dict.
        variant (str, optional): 'v1', 'v2' or 'v3'; detected when None.

    Returns:
        OrderedDict: The state dict of ``ImageClassifier(backbone=LeCT,
        neck=GlobalAveragePooling, head=LinearClsHead)``.

    Raises:
        ValueError: On an unknown variant or any key that has no mapping.
    """
    if variant is None:
        variant = detect_variant(state_dict)
    if variant not in VARIANTS:
        raise ValueError(f'Unknown variant {variant!r}; choose from '
                         f'{list(VARIANTS)}.')
    converted, unmapped = OrderedDict(), []
    for key, value in state_dict.items():
        new_key = None
        match = re.match(r'^(patch_embed|norm)(\d+)\.(.+)$', key)
        if match:
            part, stage, rest = match.groups()
            stage = int(stage) - 1
            part = 'patch_embed' if part == 'patch_embed' else 'norm'
            new_key = f'backbone.stages.{stage}.{part}.{rest}'
        elif key.startswith('head.'):
            new_key = 'head.fc.' + key[len('head.'):]
        else:
            match = re.match(r'^blocks(\d+)\.(\d+)\.(.+)$', key)
            if match:
                stage, block, rest = match.groups()
                inner = _map_block_key(rest, variant)
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


def load_reference(path: str) -> Dict[str, torch.Tensor]:
    """Read a reference checkpoint (plain, 'model' or 'state_dict')."""
    checkpoint = torch.load(path, map_location='cpu', weights_only=True)
    for wrapper in ('state_dict', 'model'):
        if isinstance(checkpoint, dict) and isinstance(
                checkpoint.get(wrapper), dict):
            return checkpoint[wrapper]
    return checkpoint


def build_target_model(variant: str, num_classes: int,
                       config: Optional[str] = None):
    """The lect_mm classifier the converted weights must fit."""
    import lect_mm  # noqa: F401  (registers LeCT and its blocks)
    from mmpretrain.registry import MODELS
    if config is not None:
        from mmengine.config import Config
        model_cfg = Config.fromfile(config).model
        model_cfg.pop('data_preprocessor', None)
    else:
        from lect_mm.models.backbones import LeCT
        model_cfg = dict(
            type='ImageClassifier',
            backbone=dict(type='LeCT', arch=variant),
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=num_classes,
                      in_channels=LeCT.arch_zoo[variant]['embed_dims'][-1]))
    return MODELS.build(model_cfg)


def check_strict(model, state_dict) -> None:
    """``load_state_dict(strict=True)`` with a readable error."""
    model_keys = set(model.state_dict())
    missing = sorted(model_keys - set(state_dict))
    unexpected = sorted(set(state_dict) - model_keys)
    if missing or unexpected:
        raise ValueError(
            f'Converted weights do not match the model: missing keys '
            f'{missing[:10]} ({len(missing)}), unexpected keys '
            f'{unexpected[:10]} ({len(unexpected)}).')
    model.load_state_dict(state_dict, strict=True)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='Convert reference LeCT weights to lect_mm/mmpretrain.')
    parser.add_argument('src', help='reference checkpoint path')
    parser.add_argument('dst', help='output checkpoint path')
    parser.add_argument('--variant', choices=VARIANTS,
                        help='LeCT variant (detected from the keys if unset)')
    parser.add_argument('--config', help='config whose model must load the '
                        'result (default: LeCT of the variant + linear head)')
    args = parser.parse_args(argv)

    reference = load_reference(args.src)
    variant = args.variant or detect_variant(reference)
    state_dict = convert_lect(reference, variant)
    num_classes = state_dict['head.fc.weight'].shape[0]
    check_strict(
        build_target_model(variant, num_classes, args.config), state_dict)

    Path(args.dst).parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        dict(state_dict=state_dict,
             meta=dict(converted_from=str(args.src), variant=variant,
                       num_classes=num_classes,
                       converter='lect_ref2mmpretrain')), args.dst)
    print(f'Converted LeCT {variant} ({len(state_dict)} tensors, '
          f'{num_classes} classes) -> {args.dst}')


if __name__ == '__main__':
    main()
