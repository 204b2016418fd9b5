"""Export at any size: LeCT v1/v2/v3 through torch.export and ONNX.

Each classifier (CIFAR-10 config, eval mode, random weights with batch
statistics away from their initial values) is exported once with dynamic
batch, height and width, from a 2x3x224x224 example, by

* ``torch.export``: ``torch.export.export`` with ``Dim`` ranges (the
  smallest side: every pooled grid has at least two cells per side), run
  as ``ExportedProgram.module()``;
* ``ONNX dynamo``: ``torch.onnx.export(exported_program, dynamo=True)``,
  run in onnxruntime;
* ``ONNX TorchScript``: ``torch.onnx.export(..., dynamo=False,
  dynamic_axes=...)``, run in onnxruntime;

then run at three sizes (batch 1 at 224², 2 at 160×192, 3 at 320×256)
and compared with the eager model. The table gives the export time and the
largest absolute logit difference at each size. ``--deploy`` exports the
deployed model (``switch_to_deploy()``) and compares it with the eager,
unfolded one. ``--quick``: LeCT v1 with one block per stage, ONNX
TorchScript only, 64² and 64×96. docs/export.md explains the commands.

Examples::

    python benchmarks/export.py
    python benchmarks/export.py --models 'LeCT v3' --formats torch.export
    python benchmarks/export.py --quick
"""
import argparse
import copy
import io
import math
import sys
import time
import traceback
import warnings
from typing import Callable, Dict, List, Tuple

import torch
from common.cli import add_model_args, new_parser, resolve_models, setup
from common.models import build_classifier
from common.report import Report, machine_header, markdown_table
from torch.export import Dim

from lect_mm.blocks.utils import conv_out_size

FORMATS = ('torch.export', 'ONNX dynamo', 'ONNX TorchScript')
LECT_MODELS = ('LeCT', 'LeCT v2', 'LeCT v3')
#: (batch, height, width) of the example and of the runs.
EXAMPLE = (2, 224, 224)
SIZES = ((1, 224, 224), (2, 160, 192), (3, 320, 256))


def parse_args(argv=None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    add_model_args(parser, default=LECT_MODELS)
    parser.add_argument('--formats', nargs='+', default=list(FORMATS),
                        choices=FORMATS)
    parser.add_argument('--deploy', action='store_true',
                        help='export the deployed model (BatchNorms folded)')
    args = parser.parse_args(argv)
    if args.quick:
        args.models = args.models or ['LeCT']
        if '--formats' not in (argv if argv is not None else sys.argv):
            args.formats = ['ONNX TorchScript']
    return args


def min_side(backbone: torch.nn.Module) -> int:
    """The smallest input side at which every LeMSA of a LeCT backbone
    pools to a grid of at least two cells per side (``torch.export``
    specialises sizes 0 and 1, so smaller grids cannot be symbolic)."""
    for side in range(2, 1 << 16):
        size, fits = side, True
        for stage in backbone.stages:
            proj = stage.patch_embed.proj
            size = conv_out_size(size, proj.kernel_size[0], proj.stride[0],
                                 proj.padding[0])
            for block in stage.blocks:
                k = getattr(block.attn, 'sr_ratio', None) or 1
                fits &= size >= 2 and math.ceil(size / k) >= 2
        if fits:
            return side
    raise ValueError('no input side fits')


def _inputs(sizes) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(b, 3, h, w, generator=g) for b, h, w in sizes]


def _ort_runner(onnx_bytes: bytes) -> Callable:
    import onnxruntime as ort

    session = ort.InferenceSession(
        onnx_bytes, providers=['CPUExecutionProvider'])
    name = session.get_inputs()[0].name
    return lambda x: torch.from_numpy(
        session.run(None, {name: x.numpy()})[0])


def export(model: torch.nn.Module, fmt: str, example: torch.Tensor,
           lowest: int, cache: Dict) -> Callable:
    """Export ``model`` in ``fmt``; return a callable running the graph."""
    dims = ({0: Dim('batch', min=1, max=1024),
             2: Dim('height', min=lowest, max=8192),
             3: Dim('width', min=lowest, max=8192)}, )
    if fmt in ('torch.export', 'ONNX dynamo') and 'ep' not in cache:
        cache['ep'] = torch.export.export(
            model, (example, ), dynamic_shapes=dims)
    if fmt == 'torch.export':
        return cache['ep'].module()
    if fmt == 'ONNX dynamo':
        program = torch.onnx.export(cache['ep'], dynamo=True, verbose=False)
        return _ort_runner(program.model_proto.SerializeToString())
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # TracerWarning, deprecation
        torch.onnx.export(
            model, (example, ), f, dynamo=False, input_names=['x'],
            dynamic_axes={'x': {0: 'batch', 2: 'height', 3: 'width'}})
    return _ort_runner(f.getvalue())


def _trained_like(model: torch.nn.Module) -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) -
                                 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) +
                                0.5)
    return model


def run_model(config: str, args, sizes,
              example_size) -> Tuple[int, float, List]:
    model = _trained_like(build_classifier(config)).eval()
    if args.quick:
        model.backbone = _shallow(model.backbone)
    exported_model = copy.deepcopy(model)
    if args.deploy:
        exported_model.backbone.switch_to_deploy()
    lowest = min_side(model.backbone)
    inputs = _inputs(sizes)
    with torch.no_grad():
        refs = [model(x) for x in inputs]
    example = torch.randn(example_size[0], 3, *example_size[1:])
    cache, rows = {}, []
    for fmt in args.formats:
        print(f'  {fmt}', file=sys.stderr, flush=True)
        try:
            start = time.perf_counter()
            run = export(exported_model, fmt, example, lowest, cache)
            seconds = time.perf_counter() - start
            cells = []
            for x, ref in zip(inputs, refs):
                with torch.no_grad():
                    out = run(x)
                cells.append(f'{(out - ref).abs().max().item():.1e}')
            rows.append([fmt, f'{seconds:.1f}'] + cells)
        except Exception as err:  # noqa: BLE001  (report and go on)
            traceback.print_exc()
            rows.append([fmt, 'failed: ' + f'{type(err).__name__}: '
                         f'{err}'.splitlines()[0][:120]] + [''] * len(sizes))
    return lowest, max(r.abs().max().item() for r in refs), rows


def _shallow(backbone: torch.nn.Module) -> torch.nn.Module:
    """--quick: one block per stage."""
    for stage in backbone.stages:
        del stage.blocks[1:]
    return backbone


def main(argv=None) -> Report:
    args = parse_args(argv)
    setup(args)
    report = Report('export', args.out)
    report.add(machine_header(torch.device('cpu'), 'Export at any size'))
    sizes, example_size = SIZES, EXAMPLE
    if args.quick:
        sizes, example_size = ((1, 64, 64), (2, 64, 96)), (2, 80, 80)
    rows = []
    for name, config in resolve_models(args.models, args.quick,
                                       LECT_MODELS).items():
        print(f'[{name}] {config}', file=sys.stderr, flush=True)
        lowest, largest, model_rows = run_model(config, args, sizes,
                                                example_size)
        rows += [[name, f'{lowest}', f'{largest:.2f}'] + row
                 for row in model_rows]
    what = 'deployed model' if args.deploy else 'model'
    report.add(f'### Max |exported − eager| of the logits ({what}, exported '
               f'from {example_size[0]}×3×{example_size[1]}×'
               f'{example_size[2]}, dynamic batch, height, width)')
    report.add()
    report.add(markdown_table(
        ['Model', 'smallest side', 'largest logit', 'format', 'export s'] +
        [f'bs {b}, {h}×{w}' for b, h, w in sizes], rows))
    report.add()
    report.add('smallest side: the lower bound of the height and width '
               'Dims. largest logit: the largest eager |logit| at these '
               'sizes. '
               'export s: seconds to export; ONNX dynamo translates '
               'the program of the torch.export row, which is timed there '
               'when both run. ONNX graphs run in onnxruntime '
               '(CPUExecutionProvider).')
    report.add()
    report.save()
    return report


if __name__ == '__main__':
    main()
