"""Write a lect_mm checkpoint as a timm model in the Hugging Face Hub layout.

Usage::

    python tools/model_converters/lect_mm2timm_hf.py CKPT MODEL OUT_DIR \\
        [--config CONFIG] [--img-size SIZE]

CKPT is a checkpoint of ``tools/train.py`` (or any file holding the
mmpretrain model's state dict, plain or under ``'state_dict'``); MODEL is the
timm name of its model (``lect_v1``, ``ceit_t``, ... see ``docs/timm.md``).
The model's architecture is the config's: ``--config CONFIG`` (the training
config) or, without it, the one the checkpoint records (``meta.cfg``, which
mmengine's runner writes); a file that records none needs ``--config``, and a
config whose model MODEL cannot build (another head, arch, ...) or that
differs from the recorded one is refused. Every backbone argument in which
the config differs from MODEL's (``attn_cfg``, ``img_size``, ...), the
classes and the input channels are passed to ``timm.create_model(MODEL,
pretrained=True, pretrained_cfg_overlay=dict(file=CKPT, ...))``, which
loads the weights strictly, and written by timm's own ``save_for_hf`` into
``OUT_DIR/config.json`` (``model_args``) beside ``OUT_DIR/model.safetensors``.
``timm.create_model('local-dir:OUT_DIR', pretrained=True)`` builds the same
model from them (and so does the Hub, once uploaded).

The config's ``data_preprocessor`` mean and std go into the exported
preprocessing (none: the zoo's CIFAR-10 values); ``--img-size`` is the input
side it was trained at (default: the backbone's ``img_size``, else the
model's default, 224; CCT 32).
"""
import argparse
import sys

import torch


def export(checkpoint: str, name: str, out_dir: str, config=None,
           img_size=None):
    """Convert ``checkpoint`` of zoo model ``name`` into ``out_dir``;
    returns the timm model."""
    import timm
    from mmengine.config import Config
    from timm.models import save_for_hf

    import lect_mm.timm  # noqa: F401  (registers the zoo's names)
    from lect_mm.timm import ZOO, model_args
    from lect_mm.timm.weights import config_differences, recorded_config
    if name not in ZOO:
        raise SystemExit(f'{name!r} is not a lect_mm timm model; choose '
                         f'from {sorted(ZOO)}.')
    recorded = recorded_config(
        torch.load(checkpoint, map_location='cpu', weights_only=True))
    cfg = Config.fromfile(config) if config is not None else recorded
    if cfg is None or 'model' not in cfg:
        raise SystemExit(
            f'{checkpoint} records no config (meta.cfg): pass --config, the '
            'config it was trained with, so that its architecture goes '
            'into config.json.')
    if recorded is not None and config is not None:
        diffs = config_differences(recorded.model.to_dict(),
                                   cfg.model.to_dict())
        if diffs:
            raise SystemExit(f'{config} is not the config {checkpoint} was '
                             'trained with: ' + '; '.join(diffs))
    try:
        args = model_args(name, cfg.model.to_dict())
    except ValueError as e:
        raise SystemExit(f'{checkpoint}: {e}')
    side = img_size or args.get('img_size') or ZOO[name].input_size
    side = side[0] if isinstance(side, (list, tuple)) else side
    overlay = dict(
        file=checkpoint,
        num_classes=args['num_classes'],
        input_size=(args['in_chans'], side, side))
    pre = cfg.get('data_preprocessor') or cfg.model.get(
        'data_preprocessor') or {}
    if 'mean' in pre and 'std' in pre:
        overlay.update(
            mean=tuple(m / 255 for m in pre['mean']),
            std=tuple(s / 255 for s in pre['std']))
    model = timm.create_model(
        name, pretrained=True, pretrained_cfg_overlay=overlay, **args)
    save_for_hf(model, out_dir, safe_serialization=True)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='Write a lect_mm checkpoint as a timm model '
        '(config.json + model.safetensors).')
    parser.add_argument('checkpoint', help='lect_mm / mmpretrain checkpoint')
    parser.add_argument('model', help='timm name of its model, e.g. lect_v1')
    parser.add_argument('out_dir', help='output folder')
    parser.add_argument('--config', help='training config (default: the one '
                        'the checkpoint records)')
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
