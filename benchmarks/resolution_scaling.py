"""Forward time and peak memory against input resolution (224² to 896²).

LeMSA's cost per head is Nq·N·d (LeCT report §3.3): with a fixed
spatial-reduction ratio K the pooled grid grows with the input and the cost is
quadratic in the number of tokens N (divided by K²); with a fixed pooled grid
(``pool_size``) it is linear in N. This script measures both LeCT (v1) settings
next to the two plain-attention baselines of the report:

* ``LeCT pool_size``: each stage's LeMSA gets the pooled grid it has at 224
  input, (4, 4), (4, 4), (7, 7), instead of sr_ratio 14/7/2;
* ``LeCT sr_ratio``: the report's LeCT, K = 14, 7, 2 at every size;
* ``CeiT (GAP)`` and ``ViT``: global attention over all patch tokens, so
  quadratic in N. Models that cannot take other sizes (fixed position
  embedding) are reported as such and skipped.

Eval mode, ``torch.inference_mode``, batch 1 by default; the log-log plot
of time against pixels has dashed slope-1 and slope-2 guides.

Example::

    python benchmarks/resolution_scaling.py --out work_dirs/bench
    python benchmarks/resolution_scaling.py --amp --sizes 224 448 896
"""
import argparse
import gc
import sys
import traceback
from typing import Dict, List, Optional

import torch
from common.cli import new_parser, setup
from common.memory import MEMORY_NOTE, fmt_bytes, peak_memory
from common.models import (MODEL_CONFIGS, build_classifier, inference_call,
                           load_config)
from common.report import Report, machine_header, markdown_table, save_plot
from common.timing import measure

# LeCT (v1) pooled grids at 224 input: stages at 56², 28², 14² with K = 14,
# 7, 2 (LeCT report §3.3 and Appendix).
LECT_POOL_SIZES = [(4, 4), (4, 4), (7, 7)]


def variants() -> Dict[str, tuple]:
    """``{name: (config, cfg_options)}`` of the compared models."""
    pool = dict(attn_cfg=[
        dict(sr_ratio=None, pool_size=list(p)) for p in LECT_POOL_SIZES
    ])
    return {
        'LeCT pool_size': (MODEL_CONFIGS['LeCT'], {'model.backbone': pool}),
        'LeCT sr_ratio': (MODEL_CONFIGS['LeCT'], None),
        'CeiT (GAP)': (MODEL_CONFIGS['CeiT (GAP)'], None),
        'ViT': (MODEL_CONFIGS['ViT'], None),
    }


def parse_args(argv=None) -> argparse.Namespace:
    names = list(variants())
    parser = new_parser(__doc__)
    parser.add_argument(
        '--models', nargs='+', default=None, choices=names,
        metavar='MODEL',
        help=f'subset of {names} (default all; --quick: the two LeCT)')
    parser.add_argument('--sizes', nargs='+', type=int,
                        default=[224, 320, 448, 640, 896])
    parser.add_argument('--batch-size', type=int, default=1)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--amp', action='store_true', help='bf16 autocast')
    args = parser.parse_args(argv)
    if args.quick:
        args.models = args.models or ['LeCT pool_size', 'LeCT sr_ratio']
        args.sizes = [64, 96]
        args.warmup, args.repeats = 0, 1
    args.models = args.models or names
    return args


def _build(config: str, options: Optional[dict]):
    return build_classifier(load_config(config, options)).eval()


def _is_oom(err: Exception) -> bool:
    return isinstance(err, torch.cuda.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and 'out of memory' in str(err))


def _time_and_memory(model, x: torch.Tensor, device: torch.device, args):
    """(time stats, peak memory) of one inference call."""
    forward = inference_call(model, x, device, args.amp)
    return (measure(forward, device, args.warmup, args.repeats),
            peak_memory(forward, device))


def run(args, device: torch.device, report: Report) -> None:
    results: Dict[str, Dict[int, object]] = {}
    for name in args.models:
        config, options = variants()[name]
        results[name] = {}
        model = None
        for size in args.sizes:
            print(f'[{name}] {size}²', file=sys.stderr, flush=True)
            try:
                if model is None:
                    model = _build(config, options).to(device)
                x = torch.randn(args.batch_size, 3, size, size, device=device)
                results[name][size] = _time_and_memory(model, x, device, args)
            except Exception as err:  # noqa: BLE001  (report and go on)
                if _is_oom(err):
                    results[name][size] = 'OOM'
                else:
                    traceback.print_exc()
                    results[name][size] = (f'{type(err).__name__}: '
                                           f'{str(err).splitlines()[0]}')[:90]
            finally:
                gc.collect()
                if device.type == 'cuda':
                    torch.cuda.empty_cache()
        del model

    first, last = args.sizes[0], args.sizes[-1]
    ratio_head = f't({last})/t({first})'
    time_rows: List[list] = []
    mem_rows: List[list] = []
    notes = []
    for name, by_size in results.items():
        trow, mrow = [name], [name]
        for size in args.sizes:
            res = by_size[size]
            if isinstance(res, tuple):
                trow.append(res[0].ms())
                mrow.append(fmt_bytes(res[1]))
            else:
                short = 'OOM' if res == 'OOM' else 'fails'
                trow.append(short)
                mrow.append(short)
                if res != 'OOM':
                    notes.append(f'- {name} at {size}²: {res}')
        ok = [by_size[s] for s in (first, last)]
        if all(isinstance(r, tuple) for r in ok):
            trow.append(f'{ok[1][0].median / ok[0][0].median:.1f}')
        else:
            trow.append('n/a')
        time_rows.append(trow)
        mem_rows.append(mrow)

    pixel_ratio = (last / first)**2
    prec = 'bf16 autocast' if args.amp else 'fp32'
    report.add(f'### Forward time against resolution (batch '
               f'{args.batch_size}, {prec}, eval, inference_mode)')
    report.add()
    report.add(
        markdown_table(['Model'] + [f'{s}² ms' for s in args.sizes] +
                       [ratio_head], time_rows))
    report.add()
    report.add(f'Median [IQR] of {args.repeats} runs after {args.warmup} '
               f'warm-up runs. {last}² has {pixel_ratio:.3g}× the pixels of '
               f'{first}²: linear scaling gives t({last})/t({first}) ≈ '
               f'{pixel_ratio:.3g}, quadratic ≈ {pixel_ratio**2:.3g}. '
               f'LeCT pool_size uses pooled grids {LECT_POOL_SIZES} at every '
               'size; LeCT sr_ratio keeps K = 14, 7, 2.')
    report.add()
    report.add('### Peak memory against resolution')
    report.add()
    report.add(
        markdown_table(['Model'] + [f'{s}²' for s in args.sizes], mem_rows))
    report.add()
    report.add(f'{MEMORY_NOTE[device.type]}.')
    if notes:
        report.add()
        report.add('Failures:')
        report.add('\n'.join(notes))
    report.add()

    def series(value):
        out = {}
        for name, by_size in results.items():
            pts = [(s * s, value(by_size[s])) for s in args.sizes
                   if isinstance(by_size[s], tuple)]
            pts = [p for p in pts if p[1]]
            if pts:
                out[name] = ([p[0] for p in pts], [p[1] for p in pts])
        return out

    save_plot(report.path('resolution_scaling_time.png'),
              series(lambda r: r[0].median * 1e3),
              'input pixels (H·W)', 'forward time (ms)',
              f'Forward time, batch {args.batch_size}, {prec}, '
              f'{device.type}', reference_slopes=(1, 2))
    save_plot(report.path('resolution_scaling_memory.png'),
              series(lambda r: r[1] / 2**20 if r[1] else None),
              'input pixels (H·W)',
              'peak memory (MiB)',
              f'Peak memory, batch {args.batch_size}, {prec}, {device.type}',
              reference_slopes=(1, 2))


def main(argv=None) -> Report:
    args = parse_args(argv)
    device = setup(args)
    report = Report('resolution_scaling', args.out)
    report.add(machine_header(device, 'Resolution scaling'))
    run(args, device, report)
    report.save()
    return report


if __name__ == '__main__':
    main()
