"""Plot how fast several trainings converge, from mmengine's scalar logs.

Reads ``WORK_DIR/<timestamp>/vis_data/scalars.json`` (written by mmengine's
``LoggerHook`` through ``LocalVisBackend``) of each work dir, plots the
validation metric and the training loss (mean of the logged values of each
epoch) against the epoch, marks the first epoch where each run reaches
``--threshold``, and prints a markdown table. This is the measurement behind
the LeCT report's claim that LeCT reaches 60% top-1 10-20 epochs earlier than
all the baselines but CeiT (stated with the report's Table 2 results).

A work dir may hold several timestamped runs. The latest run is used; when it
was resumed (its first logged epoch is after epoch 1), the earlier runs fill
the epochs before it, so a resumed training is read as one curve.

Example::

    python tools/analysis_tools/plot_convergence.py \\
        work_dirs/lect_cifar10 work_dirs/ceit_cifar10 \\
        --labels LeCT CeiT --metric accuracy/top1 --threshold 60 \\
        --out convergence.png
"""
import argparse
import json
import math
import os
import os.path as osp
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import numpy as np


def find_scalar_files(work_dir: str) -> List[str]:
    """Find the scalar logs of a work dir, oldest run first.

    Args:
        work_dir (str): A work dir (holding ``<timestamp>/vis_data/``), one
            run's timestamp dir, or a ``scalars.json`` file itself.

    Returns:
        list[str]: Paths of the ``scalars.json`` files, sorted by run.
    """
    if osp.isfile(work_dir):
        return [work_dir]
    direct = osp.join(work_dir, 'vis_data', 'scalars.json')
    if osp.isfile(direct):
        return [direct]
    if not osp.isdir(work_dir):
        raise FileNotFoundError(f'work dir {work_dir!r} does not exist')
    files = []
    # mmengine's timestamps (YYYYmmdd_HHMMSS) sort chronologically.
    for name in sorted(os.listdir(work_dir)):
        path = osp.join(work_dir, name, 'vis_data', 'scalars.json')
        if osp.isfile(path) and osp.getsize(path) > 0:
            files.append(path)
    if not files:
        raise FileNotFoundError(
            f'no <timestamp>/vis_data/scalars.json under {work_dir!r}; is it '
            'an mmengine work dir with the LocalVisBackend enabled?')
    return files


def read_scalars(path: str,
                 metric: str = 'accuracy/top1',
                 loss_key: str = 'loss') -> Dict[str, Dict[int, float]]:
    """Read one ``scalars.json`` into per-epoch validation and loss values.

    Training records carry an ``epoch`` key; validation records carry the
    metric and (with mmengine's default ``log_metric_by_epoch=True``) the
    epoch as ``step``.

    Args:
        path (str): A ``scalars.json`` (one JSON object per line).
        metric (str): The validation metric key. Defaults to
            ``'accuracy/top1'``.
        loss_key (str): The training loss key. Defaults to ``'loss'``.

    Returns:
        dict: ``{'val': {epoch: value}, 'loss': {epoch: mean loss}}``.
    """
    val: Dict[int, float] = {}
    losses: Dict[int, List[float]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            if metric in rec:
                epoch = int(rec.get('epoch', rec.get('step', 0)))
                val[epoch] = float(rec[metric])
            elif 'epoch' in rec and loss_key in rec:
                losses[int(rec['epoch'])].append(float(rec[loss_key]))
    loss = {e: float(np.mean(v)) for e, v in losses.items()}
    return dict(val=val, loss=loss)


def load_run(work_dir: str,
             metric: str = 'accuracy/top1',
             loss_key: str = 'loss',
             latest_only: bool = False) -> Dict[str, Dict[int, float]]:
    """Read a work dir's latest run, merged with the runs it resumed from.

    Starting from the latest run, while the earliest epoch read so far is
    after epoch 1, the previous run supplies the epochs before it.

    Args:
        work_dir (str): See :func:`find_scalar_files`.
        metric (str): See :func:`read_scalars`.
        loss_key (str): See :func:`read_scalars`.
        latest_only (bool): Read only the latest run. Defaults to False.

    Returns:
        dict: ``{'val': {epoch: value}, 'loss': {epoch: value}}``, sorted.
    """
    files = find_scalar_files(work_dir)
    merged: Dict[str, Dict[int, float]] = dict(val={}, loss={})
    for path in reversed(files):
        run = read_scalars(path, metric, loss_key)
        epochs = set(run['val']) | set(run['loss'])
        if not epochs:
            continue
        first = min(set(merged['val']) | set(merged['loss']),
                    default=math.inf)
        for key in ('val', 'loss'):
            for epoch, value in run[key].items():
                if epoch < first:
                    merged[key][epoch] = value
        if latest_only or min(epochs) <= 1 or first <= 1:
            break
    if not merged['val'] and not merged['loss']:
        raise ValueError(
            f'{work_dir!r}: no {metric!r} or {loss_key!r} records found')
    return {k: dict(sorted(v.items())) for k, v in merged.items()}


def summarize(val: Dict[int, float], threshold: float) -> dict:
    """Best value, its epoch, and the first epoch reaching ``threshold``.

    Args:
        val (dict[int, float]): Validation metric per epoch.
        threshold (float): The level to reach (same unit as the metric).

    Returns:
        dict: ``best``, ``best_epoch`` (the first epoch of the best value)
        and ``first_epoch`` (None when never reached); None values when
        ``val`` is empty.
    """
    if not val:
        return dict(best=None, best_epoch=None, first_epoch=None)
    best_epoch = max(val, key=lambda e: (val[e], -e))
    first = next((e for e in sorted(val) if val[e] >= threshold), None)
    return dict(best=val[best_epoch], best_epoch=best_epoch, first_epoch=first)


def markdown_table(labels: Sequence[str], summaries: Sequence[dict],
                   metric: str, threshold: float) -> str:
    """Format the per-run summaries as a markdown table."""
    thr = f'{threshold:g}'
    lines = [
        f'| run | best {metric} | epoch of best | first epoch ≥ {thr} |',
        '|---|---|---|---|',
    ]
    for label, s in zip(labels, summaries):
        best = '—' if s['best'] is None else f'{s["best"]:.2f}'
        best_ep = '—' if s['best_epoch'] is None else str(s['best_epoch'])
        first = '—' if s['first_epoch'] is None else str(s['first_epoch'])
        lines.append(f'| {label} | {best} | {best_ep} | {first} |')
    return '\n'.join(lines)


def plot_runs(runs: Sequence[dict],
              labels: Sequence[str],
              summaries: Sequence[dict],
              metric: str,
              threshold: float,
              out: str,
              fig_size=(10.0, 4.0),
              dpi: int = 100,
              title: Optional[str] = None) -> None:
    """Draw validation metric and training loss against epoch.

    The saved picture is exactly ``fig_size * dpi`` pixels.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=fig_size, dpi=dpi)
    ax_val, ax_loss = fig.subplots(1, 2)
    colors = [f'C{i % 10}' for i in range(len(runs))]
    for run, label, s, color in zip(runs, labels, summaries, colors):
        if run['val']:
            ax_val.plot(list(run['val']), list(run['val'].values()),
                        color=color, marker='.', markersize=3, label=label)
        if s['first_epoch'] is not None:
            e = s['first_epoch']
            ax_val.axvline(e, color=color, linestyle=':', linewidth=1)
            ax_val.plot([e], [run['val'][e]], marker='o', markersize=7,
                        markerfacecolor='none', color=color)
            ax_val.annotate(f'{e}', (e, run['val'][e]), color=color,
                            textcoords='offset points', xytext=(4, -12),
                            fontsize=8)
        if run['loss']:
            ax_loss.plot(list(run['loss']), list(run['loss'].values()),
                         color=color, marker='.', markersize=3, label=label)
    ax_val.axhline(threshold, color='grey', linestyle='--', linewidth=1,
                   label=f'threshold {threshold:g}')
    ax_val.set_xlabel('epoch')
    ax_val.set_ylabel(f'val {metric}')
    ax_val.set_title(f'validation {metric}', fontsize=10)
    ax_val.legend(fontsize=8, loc='lower right')
    ax_val.grid(alpha=0.3)
    ax_loss.set_xlabel('epoch')
    ax_loss.set_ylabel('train loss (epoch mean)')
    ax_loss.set_title('training loss', fontsize=10)
    ax_loss.legend(fontsize=8, loc='upper right')
    ax_loss.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    out_dir = osp.dirname(osp.abspath(out))
    os.makedirs(out_dir, exist_ok=True)
    fig.savefig(out, dpi=dpi)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Plot validation accuracy and training loss per epoch '
        'of several mmengine work dirs and tabulate when each reaches a '
        'threshold')
    parser.add_argument(
        'work_dirs', nargs='+',
        help='work dirs (or timestamp dirs, or scalars.json files)')
    parser.add_argument(
        '--metric', default='accuracy/top1',
        help='validation metric key in scalars.json')
    parser.add_argument(
        '--loss-key', default='loss', help='training loss key')
    parser.add_argument(
        '--threshold', type=float, default=60.0,
        help='level whose first crossing is marked (metric units)')
    parser.add_argument('--labels', nargs='+', help='one label per work dir')
    parser.add_argument(
        '--out', default='convergence.png', help='output picture')
    parser.add_argument(
        '--latest-only', action='store_true',
        help='read only the latest run of each work dir, even if resumed')
    parser.add_argument(
        '--fig-size', type=float, nargs=2, default=[10.0, 4.0],
        metavar=('W', 'H'), help='figure size in inches')
    parser.add_argument('--dpi', type=int, default=100)
    parser.add_argument('--title', help='figure title')
    args = parser.parse_args(argv)
    if args.labels is not None and len(args.labels) != len(args.work_dirs):
        parser.error(f'--labels: got {len(args.labels)} labels for '
                     f'{len(args.work_dirs)} work dirs')
    return args


def main(argv=None) -> str:
    args = parse_args(argv)
    labels = args.labels or [
        osp.basename(osp.normpath(w)) for w in args.work_dirs
    ]
    runs = [
        load_run(w, args.metric, args.loss_key, args.latest_only)
        for w in args.work_dirs
    ]
    summaries = [summarize(r['val'], args.threshold) for r in runs]
    plot_runs(runs, labels, summaries, args.metric, args.threshold, args.out,
              tuple(args.fig_size), args.dpi, args.title)
    table = markdown_table(labels, summaries, args.metric, args.threshold)
    print(table)
    print(f'\nsaved {args.out}')
    return table


if __name__ == '__main__':
    main()
