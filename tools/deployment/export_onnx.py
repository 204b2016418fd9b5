"""Export a config's classifier to ONNX and check it in ONNX Runtime.

Usage::

    python tools/deployment/export_onnx.py CONFIG [CHECKPOINT] --out FILE.onnx
        [--shape H W] [--dynamic [batch|size]] [--deploy]
        [--cfg-options KEY=VALUE ...]

The graph starts after the data preprocessor (normalised images in, logits
out) and is exported through ``torch.export`` at opset 23
(:func:`lect_mm.export.export_onnx`): at a fixed size by default,
``--dynamic`` for a dynamic batch of ``--shape`` images, ``--dynamic
size`` for a dynamic batch, height and width. ``--deploy`` folds the
BatchNorms first (``switch_to_deploy()``). Without a checkpoint the model
is initialised, as for a speed test. The tool then runs the graph in ONNX
Runtime on random images (other batches and sizes where they are dynamic),
prints the largest difference from the eager model and the node counts of
the exported and of ONNX Runtime's optimised graph, and exits with an error
when the difference exceeds ``--atol``.
"""
import argparse
import sys
import warnings

import torch
from mmengine.config import Config, DictAction

from lect_mm.analysis import add_shape_argument, init_weights_quietly


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Export a classifier to ONNX and check it in ONNX '
        'Runtime')
    parser.add_argument('config', help='config file path')
    parser.add_argument('checkpoint', nargs='?',
                        help='checkpoint (default: initialised weights)')
    parser.add_argument('--out', required=True, help='the .onnx file')
    add_shape_argument(parser)
    parser.add_argument(
        '--dynamic', nargs='?', const='batch', choices=['batch', 'size'],
        help='dynamic batch (the default of the flag), or dynamic batch, '
        'height and width (size)')
    parser.add_argument('--deploy', action='store_true',
                        help='fold the BatchNorms (switch_to_deploy())')
    parser.add_argument('--min-side', type=int, default=57,
                        help='smallest side of --dynamic size (57 for LeCT '
                        'v1/v3, 113 for v2; docs/export.md)')
    parser.add_argument('--atol', type=float, default=1e-4,
                        help='largest accepted difference from eager')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of the config')
    return parser.parse_args(argv)


def load_classifier(config: str, checkpoint=None, cfg_options=None):
    """The config's classifier in eval mode: ``checkpoint`` loaded strictly
    (lect_mm's verified loader), else initialised."""
    from mmpretrain.apis import get_model

    from lect_mm.engine import load_weights

    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    model = get_model(cfg)
    if checkpoint:
        load_weights(model, checkpoint, map_location='cpu', strict=True)
    else:
        init_weights_quietly(model)
    return model.eval()


def check_inputs(shape, dynamic, min_side):
    """Random images the graph must serve: the example batch, and other
    batches and sizes where they are dynamic."""
    h, w = shape
    g = torch.Generator().manual_seed(0)
    sizes = [(2, h, w)]
    if dynamic:
        sizes += [(1, h, w), (3, h, w)]
    if dynamic == 'size':
        sizes += [(2, max(min_side, h * 3 // 4), max(min_side, w + 32))]
    return [torch.randn(b, 3, y, x, generator=g) for b, y, x in sizes]


def main(argv=None) -> dict:
    from lect_mm.export import (export_onnx, max_difference, optimized_graph,
                                prepare_for_export)
    args = parse_args(argv)
    model = load_classifier(args.config, args.checkpoint, args.cfg_options)
    exported = prepare_for_export(model, deploy=args.deploy)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the exporters' deprecation notes
        export_onnx(exported, args.out, args.shape, args.dynamic,
                    min_side=args.min_side)
    inputs = check_inputs(args.shape, args.dynamic, args.min_side)
    diff = max_difference(args.out, model, inputs)
    nodes, optimized, ops = optimized_graph(args.out)
    print(f'{args.out}: {nodes} nodes exported, {optimized} after ONNX '
          'Runtime\'s optimisation (' + ', '.join(
              f'{op} {n}' for op, n in ops.most_common()) + ')')
    print(f'largest difference from eager on {len(inputs)} inputs '
          f'({", ".join("x".join(map(str, x.shape)) for x in inputs)}): '
          f'{diff:.2e}')
    if not diff <= args.atol:
        sys.exit(f'{args.out}: the graph differs from the eager model by '
                 f'{diff:.2e} > --atol {args.atol:g}')
    return dict(nodes=nodes, optimized=optimized, max_diff=diff)


if __name__ == '__main__':
    main()
