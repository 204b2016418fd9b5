"""Shared pieces of the benchmark scripts in this folder.

Timing (warm-up, repeats, median and inter-quartile range, CUDA events),
peak memory, the machine header, markdown tables, PNG plots, the report's
model list, and the full training step. Each script imports what it needs::

    from _common import add_common_args, measure, markdown_table

How things are measured:

* Time: ``warmup`` untimed calls, then ``repeats`` timed calls. On CUDA each
  call is bracketed by CUDA events on the current stream and the device is
  synchronised after every call, so a figure is the GPU time of one call
  (including any gaps where the GPU waits for Python). On CPU it is
  ``time.perf_counter`` wall time. Tables give the median and the
  inter-quartile range (IQR, 25th to 75th percentile).
* Peak memory: the most tensor memory one call allocates on top of what
  was live before it (weights, optimizer state, inputs excluded). CUDA:
  ``torch.cuda.max_memory_allocated`` minus ``memory_allocated`` before
  the call (the caching allocator's reserve is not counted). CPU: the
  allocation and free events of ``torch.profiler`` with
  ``profile_memory=True``, summed in time order, in a separate untimed
  call (exact tensor bytes; RSS would blur them with allocator caching).
"""
import argparse
import contextlib
import datetime
import logging
import os
import os.path as osp
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence

os.environ.setdefault('KINETO_LOG_LEVEL', '5')  # quiet profiler on CPU

import torch  # noqa: E402

from lect_mm.analysis import count_params  # noqa: E402,F401  (re-exported)

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

# The models of the report's Table 2 (SPEC §9), CIFAR-10 configs.
MODEL_CONFIGS: Dict[str, str] = {
    'LeCT': 'configs/lect/lect_v1_cifar10.py',
    'LeCT v2': 'configs/lect/lect_v2_cifar10.py',
    'LeCT v3': 'configs/lect/lect_v3_cifar10.py',
    'CeiT (GAP)': 'configs/baselines/ceit_gap_cifar10.py',
    'AlterNet': 'configs/baselines/alternet_cifar10.py',
    'ResNet': 'configs/baselines/resnet_cifar10.py',
    'ConvNeXt': 'configs/baselines/convnext_cifar10.py',
    'ViT': 'configs/baselines/vit_cifar10.py',
}
REFERENCE_MODEL = 'ResNet'
QUICK_MODELS = ('LeCT', 'ResNet')


# --------------------------------------------------------------- arguments
def new_parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser: its docstring's first paragraph as description,
    the docstring's layout kept, and the common arguments added."""
    parser = argparse.ArgumentParser(
        description=doc.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    return parser


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--device``, ``--quick``, ``--out``, ``--threads``, ``--seed``."""
    parser.add_argument(
        '--device',
        default='auto',
        help="'auto' (CUDA if available, else CPU), 'cpu', 'cuda' or "
        "'cuda:N'. Defaults to auto.")
    parser.add_argument(
        '--quick',
        action='store_true',
        help='smoke-test mode: tiny sizes and counts, numbers meaningless')
    parser.add_argument(
        '--out',
        default=None,
        help='folder for the markdown report and PNG plots '
        '(created if missing); without it results are only printed')
    parser.add_argument(
        '--threads',
        type=int,
        default=None,
        help='torch.set_num_threads for CPU runs (default: torch default)')
    parser.add_argument('--seed', type=int, default=0)


def add_model_args(parser: argparse.ArgumentParser,
                   default: Sequence[str] = tuple(MODEL_CONFIGS)) -> None:
    """Add ``--models``: report names (see ``MODEL_CONFIGS``) or paths."""
    parser.add_argument(
        '--models',
        nargs='+',
        default=None,
        metavar='MODEL',
        help='report model names (' + ', '.join(
            f"'{m}'" for m in MODEL_CONFIGS) + ') or config paths; '
        f'default: {", ".join(default)} (--quick: '
        f'{", ".join(QUICK_MODELS)})')


def setup(args: argparse.Namespace) -> torch.device:
    """Seed, thread count and device of a parsed command line."""
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    return resolve_device(args.device)


def resolve_device(name: str) -> torch.device:
    """``'auto'`` → CUDA if available else CPU; validate the rest."""
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f'--device: invalid device {name!r}: {err}') from err
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'--device {name}: CUDA is not available here')
    if device.type not in ('cpu', 'cuda'):
        raise ValueError(f"--device must be 'auto', 'cpu' or 'cuda[:N]', "
                         f'got {name!r}')
    return device


def resolve_models(names: Optional[Sequence[str]], quick: bool,
                   default: Sequence[str] = tuple(MODEL_CONFIGS)
                   ) -> Dict[str, str]:
    """Map the ``--models`` selection to ``{display name: config path}``."""
    if not names:
        names = QUICK_MODELS if quick else default
    selected = {}
    for name in names:
        if name in MODEL_CONFIGS:
            selected[name] = MODEL_CONFIGS[name]
        elif name.endswith('.py'):
            selected[osp.splitext(osp.basename(name))[0]] = name
        else:
            raise ValueError(
                f'--models: unknown model {name!r}; choose from '
                f'{list(MODEL_CONFIGS)} or give a config path')
    return selected


# ------------------------------------------------------------------ models
def load_config(config: str, cfg_options: Optional[dict] = None):
    """``Config.fromfile`` of a repo-relative or absolute path."""
    from mmengine.config import Config

    path = config if osp.isabs(config) else osp.join(REPO_ROOT, config)
    if not osp.isfile(path):
        raise FileNotFoundError(f'config {config} not found (looked at '
                                f'{path})')
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def build_classifier(config, cfg_options: Optional[dict] = None):
    """Build and initialise the model of a config (CPU, train mode).

    Only ``cfg.model`` is used: unless it names one, the model gets
    mmpretrain's default data preprocessor (no normalisation), which is what
    synthetic-input benchmarks want; the config's top-level
    ``data_preprocessor`` (which the runner would merge in) is ignored.

    Args:
        config (str | Config): Config path or a loaded config.
        cfg_options (dict, optional): ``merge_from_dict`` overrides.

    Returns:
        nn.Module: The classifier.
    """
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS

    import lect_mm  # noqa: F401  (registers the library)

    init_default_scope('mmpretrain')
    cfg = load_config(config, cfg_options) if isinstance(config,
                                                         str) else config
    model = MODELS.build(cfg.model)
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)  # init_weights logs every parameter
    try:
        model.init_weights()
    finally:
        logger.setLevel(level)
    return model


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile`` the backbone and neck in place (the heavy parts),
    as ``compile=True`` in a config does (``CompileModelHook``).

    The classifier's ``loss``/``predict`` logic (data samples, label
    concatenation) stays eager, so nothing breaks the compiled graphs.
    """
    from lect_mm.engine import compile_submodules

    compile_submodules(model)
    return model


def autocast(device: torch.device, enabled: bool):
    """bf16 autocast on CUDA or CPU, or a no-op context."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def synthetic_samples(batch_size: int, num_classes: int,
                      device: torch.device) -> list:
    """Data samples with labels ``i % num_classes``, already on ``device``."""
    from mmpretrain.structures import DataSample

    return [
        DataSample().set_gt_label(i % num_classes).to(device)
        for i in range(batch_size)
    ]


def num_classes_of(model: torch.nn.Module) -> int:
    return int(getattr(model.head, 'num_classes', 10))


def build_report_optim_wrapper(model: torch.nn.Module,
                               device: torch.device,
                               amp: bool = False,
                               max_norm: float = 5.0):
    """mmengine's optim wrapper with the report's settings (SPEC §8).

    ``build_optim_wrapper`` of AdamW (lr 1e-3, weight decay 0.05) with
    ``clip_grad=dict(max_norm=5)``; with ``amp`` lect_mm's
    ``DeviceAmpOptimWrapper`` with ``dtype='bfloat16'``.
    """
    from mmengine.optim import build_optim_wrapper

    cfg = dict(
        type='OptimWrapper',
        optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
        clip_grad=dict(max_norm=max_norm))
    if amp:
        cfg.update(type='DeviceAmpOptimWrapper', dtype='bfloat16')
    # DeviceAmpOptimWrapper picks CPU or CUDA from mmengine's get_device.
    if device.type == 'cuda':
        torch.cuda.set_device(device)
    return build_optim_wrapper(model, cfg)


class TrainStep:
    """One training iteration as mmengine's runner runs it (SPEC §8).

    The body of ``BaseModel.train_step`` after the data preprocessor:
    forward + loss under ``optim_wrapper.optim_context``, ``parse_losses``,
    then ``optim_wrapper.update_params`` (backward, gradient-norm clip,
    AdamW step, zero grad, and the grad-norm logging to the message hub).
    The optim wrapper is built by mmengine's ``build_optim_wrapper`` from the
    configs' settings: AdamW lr 1e-3, weight decay 0.05, ``clip_grad=dict(
    max_norm=5)``; with ``amp`` it is lect_mm's ``DeviceAmpOptimWrapper``
    with ``dtype='bfloat16'`` (what ``tools/train.py --amp --cfg-options
    optim_wrapper.dtype=bfloat16`` trains with: bf16 autocast, and on CUDA
    mmengine's dynamic loss scaler as well).

    Args:
        model (nn.Module): A classifier in train mode on its device.
        device (torch.device): Where the model lives.
        amp (bool): bf16 mixed precision. Defaults to False.
        channels_last (bool): Convert the inputs to channels-last memory
            format (the model should be converted too). Defaults to False.
        max_norm (float): Clip threshold. Defaults to 5.
    """

    def __init__(self,
                 model: torch.nn.Module,
                 device: torch.device,
                 amp: bool = False,
                 channels_last: bool = False,
                 max_norm: float = 5.0) -> None:
        self.model = model
        self.device = device
        self.channels_last = channels_last
        self.optim_wrapper = build_report_optim_wrapper(
            model, device, amp, max_norm)

    def __call__(self, inputs: torch.Tensor, data_samples: list):
        if self.channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        with self.optim_wrapper.optim_context(self.model):
            losses = self.model(inputs, data_samples, mode='loss')
        loss, _ = self.model.parse_losses(losses)
        self.optim_wrapper.update_params(loss)
        return loss.detach()


# ------------------------------------------------------------------ timing
def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


@dataclass
class Stats:
    """Per-call times in seconds and their summary."""
    times: List[float] = field(default_factory=list)

    def _q(self, p: float) -> float:
        xs = sorted(self.times)
        if len(xs) == 1:
            return xs[0]
        pos = p * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def q1(self) -> float:
        return self._q(0.25)

    @property
    def q3(self) -> float:
        return self._q(0.75)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    def ms(self) -> str:
        """``median [q1–q3]`` in milliseconds."""
        return (f'{self.median * 1e3:.2f} '
                f'[{self.q1 * 1e3:.2f}–{self.q3 * 1e3:.2f}]')

    def rate(self, items: int) -> str:
        """Items per second: ``median [IQR]`` (the IQR of the rate)."""
        return (f'{fmt_rate(items / self.median)} '
                f'[{fmt_rate(items / self.q3)}–{fmt_rate(items / self.q1)}]')


def fmt_rate(x: float) -> str:
    """A rate with three significant digits and thousands separators."""
    if x >= 100:
        return f'{x:,.0f}'
    return f'{x:.1f}' if x >= 10 else f'{x:.2f}'


def _time_call(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds of one ``fn()``: CUDA events (synchronised) or perf_counter."""
    if device.type == 'cuda':
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(fn: Callable[[], object],
            device: torch.device,
            warmup: int = 3,
            repeats: int = 10) -> Stats:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    CUDA: events around each call, synchronised after each call. CPU:
    ``perf_counter``.
    """
    return measure_interleaved([fn], device, warmup, repeats)[0]


def measure_interleaved(fns: Sequence[Callable[[], object]],
                        device: torch.device,
                        warmup: int = 3,
                        repeats: int = 10) -> List[Stats]:
    """Time several competitors in turns, so that a drift of the machine's
    load (CPU) or clocks (GPU) during the measurement affects all of them
    alike. The order reverses every round (``A B``, ``B A``, ``A B``...):
    a call right after another model's can pay for what that one left
    behind (on the CPU, e.g. fresh pages for the memory it freed: two
    LeCTs at batch 64 gave 0.81x in one fixed order and 0.96x in the other),
    and alternating shares that cost out evenly.
    Warm-up calls first, in the given order."""
    if repeats < 1:
        raise ValueError(f'repeats must be >= 1, got {repeats}')
    for _ in range(warmup):
        for fn in fns:
            fn()
    synchronize(device)
    stats = [Stats() for _ in fns]
    order = list(range(len(fns)))
    for _ in range(repeats):
        for i in order:
            stats[i].times.append(_time_call(fns[i], device))
        order.reverse()
    return stats


# ------------------------------------------------------------------ memory
MEMORY_NOTE = {
    'cuda': 'peak memory = torch.cuda.max_memory_allocated during one call '
    'minus memory_allocated before it (weights, optimizer state and input '
    'excluded)',
    'cpu': 'peak memory = peak of the tensor bytes allocated during one '
    'call on top of those live before it, from the allocation and free '
    'events of torch.profiler (profile_memory=True) in a separate untimed '
    'call (exact allocator bytes, not RSS)',
}


def peak_memory(fn: Callable[[], object],
                device: torch.device) -> Optional[int]:
    """Peak bytes one ``fn()`` call allocates above the live baseline.

    See ``MEMORY_NOTE``. Returns None where the profiler's event API is
    unavailable (CPU only).
    """
    if device.type == 'cuda':
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU],
                 profile_memory=True) as prof:
        fn()
    try:
        events = prof.profiler.kineto_results.events()
        events = sorted((e for e in events if e.name() == '[memory]'
                         and e.device_type().name == 'CPU'),
                        key=lambda e: e.start_ns())
    except AttributeError:
        return None
    live = peak = 0
    for event in events:
        live += event.nbytes()  # negative for a free
        peak = max(peak, live)
    return peak


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return 'n/a'
    for unit in ('B', 'KiB', 'MiB', 'GiB'):
        if abs(n) < 1024 or unit == 'GiB':
            return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
        n /= 1024
    return f'{n:.1f} GiB'


# ------------------------------------------------------------------ header
def _git_commit() -> str:
    """Short commit of the checkout, or ``$LECT_MM_COMMIT`` without git.

    A copy of the working tree without ``.git`` (a GPU machine's) cannot
    say its commit: export ``LECT_MM_COMMIT`` there (``run_gpu.sh`` passes
    it through) or the header says ``unknown (no git checkout)``.
    """
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
    return os.environ.get('LECT_MM_COMMIT') or 'unknown (no git checkout)'


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
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print(f'[matplotlib missing: {path} not drawn]', flush=True)
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
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f'[saved {path}]', flush=True)
    return path
