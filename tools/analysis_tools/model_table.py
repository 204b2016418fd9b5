"""Tabulate parameters, FLOPs and (optionally) throughput of several configs.

Prints a markdown table, one row per config, in the format of the family
READMEs (``Model | Params (M) | FLOPs (G) | ...``). FLOPs come from
``lect_mm.analysis`` (the counter of ``get_flops.py``), which
counts attention on the blocks' explicit (literal) path, since tracers do not
see inside ``scaled_dot_product_attention``. Throughput is inference
images/s on random input: ``--warmup`` untimed iterations, then the median
of ``--repeats`` timed ones.

``--plot PNG`` also draws FLOPs against parameters.

A config that fails to build or measure gets a row with its error, the other
configs are still measured, and the tool exits with status 1 at the end.

Example::

    python tools/analysis_tools/model_table.py \\
        configs/lect/lect_v1_cifar10.py configs/ceit/ceit_t_cifar10.py \\
        --shape 224 224 --throughput --batch-size 64 --plot models.png
"""
import argparse
import os
import os.path as osp
import statistics
import time
from typing import Callable, Optional, Sequence

import torch
from mmengine.config import DictAction

from lect_mm.analysis import (add_shape_argument, build_model, count_flops,
                              count_params)


@torch.inference_mode()
def measure_throughput(model: torch.nn.Module,
                       input_shape: Sequence[int],
                       batch_size: int = 64,
                       device: str = 'cpu',
                       warmup: int = 3,
                       repeats: int = 10) -> float:
    """Inference images/s: median over ``repeats`` timed batches.

    Args:
        model (nn.Module): A classifier (``mode='tensor'`` forward).
        input_shape (Sequence[int]): (C, H, W) of one image.
        batch_size (int): Images per forward. Defaults to 64.
        device (str): Device to run on. Defaults to ``'cpu'``.
        warmup (int): Untimed iterations first. Defaults to 3.
        repeats (int): Timed iterations. Defaults to 10.

    Returns:
        float: ``batch_size / median(seconds per forward)``.
    """
    if repeats < 1:
        raise ValueError(f'repeats must be >= 1, got {repeats}')
    model = model.to(device).eval()
    x = torch.randn(batch_size, *input_shape, device=device)
    is_cuda = torch.device(device).type == 'cuda'
    times = []
    for i in range(warmup + repeats):
        if is_cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        model(x, mode='tensor')
        if is_cuda:
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return batch_size / statistics.median(times)


def model_row(config: str,
              input_shape: Sequence[int],
              flops_fn: Optional[Callable] = None,
              cfg_options: Optional[dict] = None,
              throughput: bool = False,
              **throughput_kwargs) -> dict:
    """Measure one config: name, params, FLOPs and optional images/s."""
    model = build_model(config, cfg_options)
    row = dict(
        name=osp.splitext(osp.basename(config))[0],
        config=config,
        params=count_params(model),
        flops=None if flops_fn is None else int(
            flops_fn(model, tuple(input_shape))),
        throughput=None)
    if throughput:
        row['throughput'] = measure_throughput(model, input_shape,
                                               **throughput_kwargs)
    return row


def failed_row(config: str, error: BaseException) -> dict:
    """The row of a config that could not be measured, with its error."""
    message = ' '.join(str(error).split())  # one line for the table
    return dict(
        name=osp.splitext(osp.basename(config))[0],
        config=config,
        params=None,
        flops=None,
        throughput=None,
        error=f'{type(error).__name__}: {message}')


def markdown_table(rows: Sequence[dict], input_shape: Sequence[int],
                   batch_size: Optional[int] = None,
                   device: str = 'cpu') -> str:
    """Format measured rows as a markdown table.

    An ``Error`` column is added when a row carries an ``error``.
    """
    res = f'{input_shape[1]}×{input_shape[2]}'
    header = ['Model', 'Params (M)', f'FLOPs (G) @{res}']
    with_tp = any(r['throughput'] is not None for r in rows)
    if with_tp:
        header.append(f'Throughput (img/s, bs {batch_size}, {device})')
    header.append('Config')
    with_errors = any(r.get('error') for r in rows)
    if with_errors:
        header.append('Error')
    lines = ['| ' + ' | '.join(header) + ' |',
             '|' + '---|' * len(header)]
    for r in rows:
        cells = [r['name'],
                 '—' if r['params'] is None else f'{r["params"] / 1e6:.4f}',
                 '—' if r['flops'] is None else f'{r["flops"] / 1e9:.3f}']
        if with_tp:
            cells.append('—' if r['throughput'] is None else
                         f'{r["throughput"]:.1f}')
        cells.append(r['config'])
        if with_errors:
            cells.append((r.get('error') or '').replace('|', '\\|'))
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def plot_rows(rows: Sequence[dict],
              out: str,
              input_shape: Sequence[int],
              fig_size=(6.0, 4.0),
              dpi: int = 100) -> None:
    """Scatter FLOPs against parameters, one labelled point per config.

    With throughput measured, the marker area follows images/s. The saved
    picture is exactly ``fig_size * dpi`` pixels.
    """
    from matplotlib.figure import Figure

    pts = [r for r in rows if r['flops'] is not None]
    if not pts:
        raise ValueError('--plot needs FLOPs (drop --no-flops)')
    fig = Figure(figsize=fig_size, dpi=dpi)
    ax = fig.subplots()
    tps = [r['throughput'] for r in pts]
    sizes = 40.0
    if all(t is not None for t in tps):
        sizes = [400.0 * t / max(tps) for t in tps]
    ax.scatter([r['flops'] / 1e9 for r in pts],
               [r['params'] / 1e6 for r in pts],
               s=sizes, c=[f'C{i % 10}' for i in range(len(pts))],
               alpha=0.8)
    for r in pts:
        ax.annotate(r['name'], (r['flops'] / 1e9, r['params'] / 1e6),
                    textcoords='offset points', xytext=(5, 4), fontsize=8)
    ax.set_xlabel(f'FLOPs (G) at {input_shape[1]}×{input_shape[2]}')
    ax.set_ylabel('Params (M)')
    if isinstance(sizes, list):
        ax.set_title('marker area ∝ throughput', fontsize=9)
    ax.grid(alpha=0.3)
    ax.margins(0.15)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=dpi)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Params, FLOPs and throughput of configs as a markdown '
        'table')
    parser.add_argument('configs', nargs='+', help='config files')
    add_shape_argument(parser)
    parser.add_argument(
        '--no-flops', action='store_true', help='skip the FLOP count')
    parser.add_argument(
        '--throughput', action='store_true',
        help='also measure inference images/s')
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument('--repeats', type=int, default=10)
    parser.add_argument(
        '--plot', metavar='PNG',
        help='also save a FLOPs-vs-params scatter of the configs')
    parser.add_argument(
        '--fig-size', type=float, nargs=2, default=[6.0, 4.0],
        metavar=('W', 'H'), help='--plot figure size in inches')
    parser.add_argument('--dpi', type=int, default=100)
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings of every config, xxx=yyy format')
    args = parser.parse_args(argv)
    if args.plot and args.no_flops:
        parser.error('--plot needs FLOPs; drop --no-flops')
    return args


def main(argv=None) -> str:
    args = parse_args(argv)
    input_shape = (3, *args.shape)
    flops_fn = None if args.no_flops else count_flops
    rows = []
    for cfg in args.configs:
        try:
            rows.append(
                model_row(cfg, input_shape, flops_fn, args.cfg_options,
                          args.throughput, batch_size=args.batch_size,
                          device=args.device, warmup=args.warmup,
                          repeats=args.repeats))
        except Exception as e:  # report it in the table, measure the rest
            rows.append(failed_row(cfg, e))
    failed = [r for r in rows if r.get('error')]
    table = markdown_table(rows, input_shape, args.batch_size, args.device)
    print(table)
    if args.plot and len(failed) < len(rows):
        plot_rows([r for r in rows if not r.get('error')], args.plot,
                  input_shape, tuple(args.fig_size), args.dpi)
        print(f'\nsaved {args.plot}')
    if flops_fn is not None:
        print('\nFLOPs: one multiply-add = 1 FLOP, whole classifier, '
              'attention counted on the literal path (see get_flops.py).')
    if failed:
        raise SystemExit(f'{len(failed)} of {len(rows)} configs failed: ' +
                         ', '.join(r['config'] for r in failed))
    return table


if __name__ == '__main__':
    main()
