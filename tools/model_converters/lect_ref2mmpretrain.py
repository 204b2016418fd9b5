"""Convert a LeCT checkpoint of the author's reference layout to lect_mm.

Usage::

    python tools/model_converters/lect_ref2mmpretrain.py SRC DST \\
        [--variant v1|v2|v3] [--config CONFIG]

SRC holds a state dict with the reference keys (``patch_embedI``,
``blocksI.J.{norm1,leatt,norm2,leff}``, ``normI``, ``head``), either plain or
under ``'model'`` / ``'state_dict'``; it is read with
``torch.load(weights_only=True)``. The key map and the variant detection
(v2: ``leatt.conv3`` / ``leatt.v_conv``; v3: a ConvTranspose at
``leatt.v_upsample.2``; v1 otherwise) are :mod:`lect_mm.models.convert`.

The converted state dict is checked by loading it with ``strict=True`` into
the model of ``--config`` (default: LeCT of the detected variant with a
``LinearClsHead`` sized from ``head.weight``); any missing or unexpected key
is an error. DST is an mmengine checkpoint ``{'state_dict', 'meta'}`` that
``mmpretrain.get_model(config, pretrained=DST)`` and ``tools/test.py`` load.
"""
import argparse
from pathlib import Path

import torch

from lect_mm.analysis import build_model
from lect_mm.engine.loading import load_state_dict_checked
from lect_mm.models.convert import (VARIANTS, convert_lect_ref, detect_variant,
                                    reference_state_dict)


def build_target_model(variant: str, num_classes: int, config=None):
    """The model of ``config``, else LeCT ``variant`` + GAP + linear head."""
    if config is not None:
        return build_model(config)
    from mmpretrain.registry import MODELS

    from lect_mm.models.backbones import LeCT
    return MODELS.build(dict(
        type='ImageClassifier',
        backbone=dict(type='LeCT', arch=variant),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=num_classes,
                  in_channels=LeCT.arch_zoo[variant]['embed_dims'][-1])))


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

    reference = reference_state_dict(
        torch.load(args.src, map_location='cpu', weights_only=True))
    variant = args.variant or detect_variant(reference)
    state_dict = convert_lect_ref(reference, variant)
    num_classes = state_dict['head.fc.weight'].shape[0]
    load_state_dict_checked(
        build_target_model(variant, num_classes, args.config), state_dict,
        f'The converted {args.src}', strict=True,
        opt_out='Pass the --variant and --config of the model it is for.')

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
