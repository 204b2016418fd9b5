"""Write a lect_mm checkpoint as a timm model in the Hugging Face Hub layout.

Usage::

    python tools/model_converters/lect_mm2timm_hf.py CKPT MODEL OUT_DIR \\
        [--config CONFIG] [--img-size SIZE]

CKPT is a checkpoint of ``tools/train.py`` (or any file holding the
mmpretrain model's state dict, plain or under ``'state_dict'``); MODEL is the
timm name of its model (``lect_v1``, ``ceit_t``, ... see ``docs/timm.md``).
The number of classes and input channels are read from the weights; the
model is built with ``timm.create_model(MODEL, pretrained=True,
pretrained_cfg_overlay=dict(file=CKPT, ...))``, which loads it strictly, and
written by timm's own ``save_for_hf``: ``OUT_DIR/config.json`` and
``OUT_DIR/model.safetensors``. ``timm.create_model('local-dir:OUT_DIR',
pretrained=True)`` loads it (and so does the Hub, once uploaded).

``--config`` names the training config, whose ``data_preprocessor`` mean
and std go into the exported preprocessing (default: the zoo's CIFAR-10
values); ``--img-size`` the input side it was trained at (default: the
model's, 224; CCT 32).
"""
import argparse
import sys

import torch


def export(checkpoint: str, name: str, out_dir: str, config=None,
           img_size=None):
    """Convert ``checkpoint`` of zoo model ``name`` into ``out_dir``;
    returns the timm model."""
    import timm
    from timm.models import load_state_dict, save_for_hf

    import lect_mm.timm  # noqa: F401  (registers the zoo's names)
    from lect_mm.timm import (ZOO, checkpoint_filter_fn, first_conv,
                              takes_img_size)
    if name not in ZOO:
        raise SystemExit(f'{name!r} is not a lect_mm timm model; choose '
                         f'from {sorted(ZOO)}.')
    entry = ZOO[name]
    state_dict = checkpoint_filter_fn(load_state_dict(checkpoint))
    in_chans = state_dict[first_conv(name)[0] + '.weight'].shape[1]
    num_classes = state_dict[entry.classifier + '.weight'].shape[0]
    side = img_size or entry.input_size
    overlay = dict(
        file=checkpoint,
        num_classes=num_classes,
        input_size=(in_chans, side, side))
    if config is not None:
        from mmengine.config import Config
        pre = Config.fromfile(config).get('data_preprocessor') or {}
        if 'mean' in pre and 'std' in pre:
            overlay.update(
                mean=tuple(m / 255 for m in pre['mean']),
                std=tuple(s / 255 for s in pre['std']))
    kwargs = {}
    if img_size is not None and takes_img_size(name):
        kwargs['img_size'] = img_size
    model = timm.create_model(
        name,
        pretrained=True,
        num_classes=num_classes,
        in_chans=in_chans,
        pretrained_cfg_overlay=overlay,
        **kwargs)
    save_for_hf(model, out_dir, safe_serialization=True)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='Write a lect_mm checkpoint as a timm model '
        '(config.json + model.safetensors).')
    parser.add_argument('checkpoint', help='lect_mm / mmpretrain checkpoint')
    parser.add_argument('model', help='timm name of its model, e.g. lect_v1')
    parser.add_argument('out_dir', help='output folder')
    parser.add_argument('--config', help='training config (mean and std of '
                        'its data_preprocessor)')
    parser.add_argument('--img-size', type=int, help='training input side')
    args = parser.parse_args(argv)
    model = export(args.checkpoint, args.model, args.out_dir, args.config,
                   args.img_size)
    print(f'{args.model} ({model.num_classes} classes, {model.in_chans} '
          f'input channels) -> {args.out_dir}/config.json, '
          'model.safetensors', file=sys.stdout)


if __name__ == '__main__':
    torch.set_grad_enabled(False)
    main()
