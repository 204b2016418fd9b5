"""Report output: the machine header, markdown tables, the report file and
PNG plots."""
import datetime
import os
import os.path as osp
import platform
import subprocess
import sys
from typing import Dict, Iterable, List, Optional, Sequence

import torch

from . import REPO_ROOT


def _git_commit() -> str:
    """``$LECT_MM_COMMIT`` where set, else the checkout's short commit.

    A copy of the working tree on a GPU machine has no ``.git``, or a stale
    one (the device tool sends the session's first checkout): export
    ``LECT_MM_COMMIT`` there (``run_gpu.sh`` passes it through); without
    either the header says ``unknown (no git checkout)``.
    """
    if os.environ.get('LECT_MM_COMMIT'):
        return os.environ['LECT_MM_COMMIT']
    try:
        out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                             cwd=REPO_ROOT,
                             capture_output=True,
                             text=True,
                             timeout=5)
        commit = out.stdout.strip() if out.returncode == 0 else ''
        if commit:
            dirty = subprocess.run(['git', 'status', '--porcelain'],
                                   cwd=REPO_ROOT,
                                   capture_output=True,
                                   text=True,
                                   timeout=5).stdout.strip()
            return commit + (' (uncommitted changes)' if dirty else '')
    except (OSError, subprocess.SubprocessError):
        pass
    return 'unknown (no git checkout)'


def _cpu_model() -> str:
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001  (any import failure: report it)
        return 'not installed'


def machine_header(device: torch.device, title: str) -> str:
    """Markdown lines naming the machine, the software and the command."""
    lines = [f'## {title}', '']
    load = ', '.join(f'{x:.1f}' for x in os.getloadavg()) if hasattr(
        os, 'getloadavg') else 'n/a'
    if device.type == 'cuda':
        props = torch.cuda.get_device_properties(device)
        dev = (f'{props.name} ({props.total_memory / 2**30:.0f} GiB, '
               f'CUDA {torch.version.cuda}, cuDNN '
               f'{torch.backends.cudnn.version()})')
    else:
        dev = 'CPU'
    lines += [
        f'- date: {datetime.datetime.now().isoformat(timespec="seconds")}',
        f'- device: {dev}',
        f'- CPU: {_cpu_model()}, {os.cpu_count()} logical cores, torch '
        f'threads {torch.get_num_threads()}, load average {load}',
        f'- software: Python {platform.python_version()}, torch '
        f'{torch.__version__}, mmpretrain {_version("mmpretrain")}, '
        f'mmengine {_version("mmengine")}, lect_mm {_version("lect_mm")}, '
        f'commit {_git_commit()}',
        '- command: `python ' + ' '.join(
            osp.relpath(a, REPO_ROOT) if i == 0 else a
            for i, a in enumerate(sys.argv)) + '`',
        '',
    ]
    return '\n'.join(lines)


# ------------------------------------------------------------------ output
def markdown_table(headers: Sequence[str],
                   rows: Iterable[Sequence[object]],
                   align: Optional[str] = None) -> str:
    """A GitHub markdown table; ``align`` is one char per column (l/r/c),
    default: first column left, the others right."""
    headers = [str(h) for h in headers]
    rows = [[str(c) for c in row] for row in rows]
    align = align or 'l' + 'r' * (len(headers) - 1)
    if len(align) != len(headers):
        raise ValueError('align needs one character per column')
    rule = {'l': ':---', 'r': '---:', 'c': ':---:'}
    out = ['| ' + ' | '.join(headers) + ' |',
           '|' + '|'.join(rule[a] for a in align) + '|']
    out += ['| ' + ' | '.join(r) + ' |' for r in rows]
    return '\n'.join(out)


class Report:
    """Collects markdown, prints it as it comes, writes ``<out>/<name>.md``.

    Args:
        name (str): File stem of the report.
        out (str, optional): Output folder; None prints only.
    """

    def __init__(self, name: str, out: Optional[str] = None) -> None:
        self.name = name
        self.out = out
        self.parts: List[str] = []
        if out:
            os.makedirs(out, exist_ok=True)

    def add(self, text: str = '') -> None:
        print(text, flush=True)
        self.parts.append(text)

    def path(self, filename: str) -> Optional[str]:
        return osp.join(self.out, filename) if self.out else None

    def save(self) -> Optional[str]:
        path = self.path(f'{self.name}.md')
        if path:
            with open(path, 'w') as f:
                f.write('\n'.join(self.parts) + '\n')
            print(f'[saved {path}]', flush=True)
        return path


def pyplot(path: str):
    """``matplotlib.pyplot`` on the Agg backend, or None (with a line
    saying that ``path`` is not drawn) where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print(f'[matplotlib missing: {path} not drawn]', flush=True)
        return None
    return plt


def save_figure(plt, fig, path: str) -> str:
    """Lay out, save and close ``fig`` (from :func:`pyplot`) as ``path``."""
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f'[saved {path}]', flush=True)
    return path


def save_plot(path: Optional[str],
              series: Dict[str, Sequence[Sequence[float]]],
              xlabel: str,
              ylabel: str,
              title: str,
              loglog: bool = True,
              reference_slopes: Sequence[float] = ()) -> Optional[str]:
    """Line plot of ``{label: (xs, ys)}`` saved as PNG (matplotlib, Agg).

    ``reference_slopes``: dashed guide lines y ∝ x**slope through the first
    point of the first series (e.g. 1 and 2 for linear and quadratic).
    """
    if not path or not series:
        return None
    plt = pyplot(path)
    if plt is None:
        return None

    fig, ax = plt.subplots(figsize=(6, 4.2), dpi=120)
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker='o', label=label)
    first = next((s for s in series.values() if len(s[0])), None)
    if first is not None:
        x0, y0 = first[0][0], first[1][0]
        xs = [min(first[0]), max(first[0])]
        for slope in reference_slopes:
            ax.plot(xs, [y0 * (x / x0)**slope for x in xs],
                    ls='--',
                    lw=0.8,
                    color='grey',
                    label=f'∝ x^{slope:g}')
    if loglog:
        ax.set_xscale('log')
        ax.set_yscale('log')
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(plt, fig, path)
