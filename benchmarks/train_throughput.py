"""Whole-model training throughput of the report's models (Table 2).

One full training step as the report trains (LeCT report, Appendix) and as
mmengine's runner runs it (the model's loss, then an optim wrapper built by
``build_optim_wrapper``: backward + gradient-norm clip (5) + AdamW step;
see ``common.models.TrainStep``), batch 64, 224×224, synthetic
data already on the device (so the data pipeline is not measured; see
``data_pipeline.py`` for that). Prints images/s (median and IQR over the
timed steps) and the ratio to the report's ResNet, and next to them the
device-independent footprint of a step (``lect_mm.analysis.
training_footprint``, eager fp32, batch ``min(8, --batch-size)``): the bytes
autograd saves for backward per image and the ATen ops dispatched in forward
+ backward, all and without the views, each also as a ratio to ResNet.
``--variants`` prints step time and footprint of LeCT as configured
(``with_cp=False``), with ``with_cp=True`` (its blocks recompute their cheap
layers in backward) and/or dropout turned off (what each costs in time,
memory and ops), all timed in turns with ResNet.

Examples::

    python benchmarks/train_throughput.py                    # all models
    python benchmarks/train_throughput.py --amp --channels-last --compile
    python benchmarks/train_throughput.py --amp --compile reduce-overhead
    python benchmarks/train_throughput.py --compile-speedup --models LeCT
    python benchmarks/train_throughput.py --variants --models LeCT
    python benchmarks/train_throughput.py --models LeCT ResNet --iters 50
    python benchmarks/train_throughput.py --profile LeCT --amp   # top ops
    python benchmarks/train_throughput.py --quick                # smoke test
"""
import argparse
import functools
import gc
import re
import sys
import traceback
from typing import Dict, Optional

import torch
from common.cli import (add_model_args, layout_flags, new_parser,
                        resolve_models, setup)
from common.memory import MEMORY_NOTE, fmt_bytes, peak_memory
from common.models import (COMPILE_MODES, MODEL_CONFIGS, REFERENCE_MODEL,
                           TrainStep, build_classifier, compile_model,
                           load_config, num_classes_of, synthetic_samples)
from common.report import Report, machine_header, markdown_table
from common.timing import measure, measure_interleaved, synchronize

from lect_mm.analysis import count_params, training_footprint


def parse_args(argv=None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    add_model_args(parser)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--iters', type=int, default=20,
                        help='timed steps per model (default 20)')
    parser.add_argument('--warmup', type=int, default=5,
                        help='untimed steps first (default 5; with '
                        '--compile these include compilation)')
    parser.add_argument(
        '--steps-per-turn', type=int, default=5,
        help='--variants times its rows in turns of one untimed step and '
        'this many timed steps each (default 5), so that each is timed in '
        'the steady state of its own loop')
    parser.add_argument('--amp', action='store_true',
                        help='bf16 autocast (CUDA and CPU)')
    parser.add_argument('--channels-last', action='store_true')
    parser.add_argument(
        '--compile', nargs='?', const='default', choices=COMPILE_MODES,
        metavar='MODE',
        help='torch.compile the backbone and neck, in torch.compile\'s '
        'MODE (default: its default mode; reduce-overhead adds CUDA graphs, '
        'which cut the launch cost on a GPU)')
    parser.add_argument(
        '--compile-speedup', action='store_true',
        help='instead of the table, time each model eager and compiled in '
        'turns (the same drift of the machine for both) and print the '
        'speed-up')
    parser.add_argument(
        '--variants', action='store_true',
        help='instead of the table, time (in turns) and footprint the LeCT '
        'models among --models as configured, with recomputation, '
        'without dropout and drop path, and with recomputation but without '
        'dropout, against the reference model')
    parser.add_argument(
        '--profile',
        metavar='MODEL',
        default=None,
        help='instead of the table, profile MODEL (a name of --models or a '
        'config) with torch.profiler and print the top ops by self time')
    parser.add_argument('--profile-steps', type=int, default=3)
    parser.add_argument(
        '--cpu-time', action='store_true',
        help='on the CPU, time the CPU seconds of the process (process_time) '
        'instead of wall time: with --threads 1 on a shared machine, other '
        'work changes them much less')
    parser.add_argument('--top', type=int, default=25,
                        help='rows of the profiler tables (default 25)')
    args = parser.parse_args(argv)
    if args.variants and args.compile:
        parser.error('--variants times eager steps; leave out --compile')
    if args.quick:
        # no warm-up step (the numbers mean nothing): the timed step, and in
        # --variants the untimed one of each turn, run the same code
        args.batch_size, args.iters, args.warmup = 2, 1, 0
        args.img_size = 64
        args.profile_steps = 1
    return args


def _prepare(config: str, args, device: torch.device, compiled=None,
             model: Optional[torch.nn.Module] = None):
    """Model (train mode, on device), step, inputs and labels; compiled
    when ``compiled`` (default ``args.compile``). ``model``: the one built
    from ``config`` already (by :func:`_build`), else it is built here."""
    compiled = args.compile if compiled is None else compiled
    if model is None:
        model = _build(config, device)
    model = model.train()
    params = count_params(model)
    inputs = torch.randn(args.batch_size, 3, args.img_size, args.img_size,
                         device=device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    if compiled:
        compile_model(model, args.compile)
    samples = synthetic_samples(args.batch_size, num_classes_of(model),
                                device)
    step = TrainStep(model, device, amp=args.amp,
                     channels_last=args.channels_last)
    return model, params, step, inputs, samples


def _release(device: torch.device, compiled: bool) -> None:
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    if compiled:
        torch._dynamo.reset()


def _build(config: str, device: torch.device,
           cfg_options: Optional[dict] = None) -> torch.nn.Module:
    return build_classifier(config, cfg_options).to(device)


def footprint(model: torch.nn.Module, args) -> Dict:
    """Saved bytes per image and ATen ops of an eager fp32 step of a model
    as built (before channels_last or compilation). The step changes no
    parameter (its gradients are cleared; BatchNorm statistics move, which
    step times do not depend on), so the model is then timed: one build per
    model."""
    return training_footprint(
        model, (3, args.img_size, args.img_size),
        batch_size=min(8, args.batch_size),
        num_classes=num_classes_of(model))


def model_figures(config: str, args, device: torch.device) -> Dict:
    """Footprint, parameters, step times and peak memory of one model."""
    model = _build(config, device)
    fp = footprint(model, args)
    model, params, step, inputs, samples = _prepare(config, args, device,
                                                    model=model)
    call = functools.partial(step, inputs, samples)
    stats = measure(call, device, args.warmup, args.iters, args.cpu_time)
    mem = peak_memory(call, device)
    del model, step, inputs, samples, call
    _release(device, args.compile)
    return dict(params=params, stats=stats, mem=mem, **_footprint_figures(fp))


def _footprint_figures(fp: Dict) -> Dict:
    return dict(saved=fp['saved_bytes_per_image'], ops=fp['ops'],
                kernel_ops=fp['ops'] - fp['view_ops'])


def _settings(args) -> str:
    flags = [f'batch {args.batch_size}', f'{args.img_size}²',
             'bf16 autocast' if args.amp else 'fp32']
    if args.cpu_time:
        flags.append(f'CPU time of {torch.get_num_threads()} thread(s)')
    return ', '.join(flags + layout_flags(args))


def throughput_table(args, device: torch.device, report: Report) -> None:
    """One model after the other, each alone in memory. (Timed in turns
    with all eight models alive, LeCT v1's step took 924 ms on this
    project's CPU, against 682 ms alone in the same hour.)"""
    models = resolve_models(args.models, args.quick)
    results: Dict[str, Optional[Dict]] = {}
    for name, config in models.items():
        print(f'[{name}] {config}', file=sys.stderr, flush=True)
        try:
            results[name] = model_figures(config, args, device)
            print(f'[{name}] ' + results[name]['stats'].rate(
                args.batch_size) + ' images/s', file=sys.stderr, flush=True)
        except Exception as err:  # noqa: BLE001  (report and go on)
            traceback.print_exc()
            results[name] = dict(error=f'{type(err).__name__}: {err}')
            _release(device, args.compile)
    ref = results.get(REFERENCE_MODEL)
    ref_rate = (args.batch_size / ref['stats'].median
                if ref and 'stats' in ref else None)
    rows = []
    for name, res in results.items():
        if 'error' in res:
            rows.append([name, '', 'failed: ' + res['error'][:120], '', '',
                         '', '', '', ''])
            continue
        rate = args.batch_size / res['stats'].median
        rows.append([
            name, f'{res["params"] / 1e6:.3f}', res['stats'].ms(),
            res['stats'].rate(args.batch_size),
            f'{rate / ref_rate:.2f}' if ref_rate else 'n/a',
            fmt_bytes(res['mem']),
            *_footprint_cells(res, ref),
        ])
    report.add(f'### Training throughput ({_settings(args)})')
    report.add()
    report.add(
        markdown_table([
            'Model', 'Params (M)', 'Step ms, median [IQR]',
            'Images/s, median [IQR]', f'× {REFERENCE_MODEL}', 'Peak memory',
            *FOOTPRINT_HEADERS
        ], rows))
    report.add()
    report.add(f'Full step as mmengine runs it: forward + cross-entropy, '
               f'then the optim wrapper\'s update_params (backward + '
               f'clip-grad (max norm 5) + AdamW + grad-norm logging); '
               f'{args.warmup} warm-up steps, '
               f'{args.iters} timed steps, one model after the other; '
               'synthetic data on the device. '
               f'{MEMORY_NOTE[device.type]}. Saved for backward: the '
               'distinct tensor storages autograd keeps from the forward '
               f'(saved_tensors_hooks); {OPS_NOTE}; eager fp32, batch '
               f'{min(8, args.batch_size)}, ratio to {REFERENCE_MODEL} in '
               'parentheses.')
    report.add()


FOOTPRINT_HEADERS = ('Saved for backward / image', 'ATen ops / step',
                     'Non-view ops / step')
OPS_NOTE = ('ATen ops: calls seen by a TorchDispatchMode in forward + '
            'backward; non-view ops: those that do not return an alias '
            '(views, autograd\'s detach of each parameter gradient) and so '
            'run a kernel, on a GPU at least one launch each')

#: ``--variants``: LeCT as configured, with gradient checkpointing
#: (``with_cp``) turned on and with dropout (drop_rate and drop path) turned
#: off, as config overrides.
_WITH_CP = {'model.backbone.with_cp': True}
_NO_DROPOUT = {
    'model.backbone.drop_rate': 0.,
    'model.backbone.drop_path_rate': 0.,
}
VARIANTS = {
    'as configured': {},
    'with_cp=True': _WITH_CP,
    'no dropout, no drop path': _NO_DROPOUT,
    'with_cp=True, no dropout, no drop path': {
        **_WITH_CP,
        **_NO_DROPOUT
    },
}


def _footprint_cells(res: Dict, ref: Optional[Dict]) -> list:
    return [
        _with_ratio(fmt_bytes(res['saved']), res['saved'], ref, 'saved'),
        _with_ratio(f'{res["ops"]:,}', res['ops'], ref, 'ops'),
        _with_ratio(f'{res["kernel_ops"]:,}', res['kernel_ops'], ref,
                    'kernel_ops'),
    ]


def variants_table(args, device: torch.device, report: Report) -> None:
    """The LeCT models among ``--models`` in each of :data:`VARIANTS`, and
    the reference model: footprint, and the full step timed in turns (all
    of them in one rotation, so the machine's drift hits all alike)."""
    runs = [(REFERENCE_MODEL, 'as configured', MODEL_CONFIGS[REFERENCE_MODEL],
             {})]
    for name, config in resolve_models(args.models, args.quick).items():
        if name == REFERENCE_MODEL:
            continue
        if load_config(config).model.backbone.type != 'LeCT':
            print(f'[{name}] not a LeCT backbone: skipped', file=sys.stderr)
            continue
        runs += [(name, variant, config, options)
                 for variant, options in VARIANTS.items()]
    figures, calls = [], []
    for name, variant, config, options in runs:
        print(f'[{name}] {variant}', file=sys.stderr, flush=True)
        model = _build(config, device, options)
        figures.append(_footprint_figures(footprint(model, args)))
        _, _, step, inputs, samples = _prepare(config, args, device,
                                               model=model)
        calls.append(functools.partial(step, inputs, samples))
    stats = measure_interleaved(calls, device, args.warmup, args.iters,
                                args.steps_per_turn, args.cpu_time)
    ref, ref_time = figures[0], stats[0].median
    rows = [[
        name, variant,
        stat.ms(), f'{ref_time / stat.median:.2f}',
        *_footprint_cells(fig, ref)
    ] for (name, variant, _, _), fig, stat in zip(runs, figures, stats)]
    report.add(f'### LeCT with with_cp on and dropout off '
               f'({_settings(args)})')
    report.add()
    report.add(
        markdown_table([
            'Model', 'variant', 'Step ms, median [IQR]',
            f'× {REFERENCE_MODEL}', *FOOTPRINT_HEADERS
        ], rows))
    report.add()
    report.add(f'The full step of the throughput table; {args.warmup} '
               f'warm-up steps each, then {args.iters} timed steps each, all '
               f'rows in turns of {args.steps_per_turn} (after one untimed '
               f'step). {OPS_NOTE}; eager fp32, '
               f'batch {min(8, args.batch_size)}, ratio to '
               f'{REFERENCE_MODEL} in parentheses. with_cp=True: the '
               'blocks recompute their cheap layers in backward instead of '
               'keeping them (as configured: with_cp=False); no dropout: '
               'drop_rate and drop_path_rate 0.')
    report.add()


def compile_speedup_table(args, device: torch.device,
                          report: Report) -> None:
    """Each model's step eager and with its backbone and neck compiled,
    timed in turns after the warm-up steps (compilation included)."""
    rows = []
    for name, config in resolve_models(args.models, args.quick).items():
        print(f'[{name}] eager and compiled', file=sys.stderr, flush=True)
        calls = []
        for compiled in (False, True):
            _, _, step, inputs, samples = _prepare(config, args, device,
                                                   compiled=compiled)
            calls.append(functools.partial(step, inputs, samples))
        eager, compiled = measure_interleaved(
            calls, device, args.warmup, args.iters, cpu_time=args.cpu_time)
        rows.append([name, eager.ms(), compiled.ms(),
                     f'{eager.median / compiled.median:.2f}×'])
        del calls
        _release(device, True)
    report.add(f'### Compiled training step ({_settings(args)})')
    report.add()
    report.add(markdown_table([
        'Model', 'eager step ms, median [IQR]',
        'compiled step ms, median [IQR]', 'speed-up'
    ], rows))
    report.add()
    report.add('The full step of the throughput table, eager and with '
               'torch.compile on the backbone and neck '
               f'({args.compile or "default"} mode), '
               f'timed in turns: {args.warmup} warm-up steps each '
               f'(compilation included), then {args.iters} timed steps '
               'each.')
    report.add()


def _with_ratio(text: str, value: float, ref: Optional[Dict],
                key: str) -> str:
    if ref and key in ref:
        return f'{text} ({value / ref[key]:.1f}×)'
    return text


def _time_attr(event, kind: str) -> float:
    """Self (``kind='self'``) or total (``'total'``) device time of a
    profiler event, in µs (torch 2.x names)."""
    prefix = 'self_' if kind == 'self' else ''
    for name in (f'{prefix}device_time_total', f'{prefix}cuda_time_total'):
        if hasattr(event, name):
            return getattr(event, name)
    return 0.0


# kernels doing the FLOPs (GEMMs, convolutions, fused attention); the
# rest (elementwise, normalisation, reductions, copies) is bound by memory
# traffic rather than arithmetic
_COMPUTE_KERNELS = re.compile(
    r'gemm|cutlass|cublas|xmma|conv(?!ert)|cudnn|[dw]grad2d|fprop|fmha|'
    r'flash|sm[89]0_|nvjet|wgmma')


def _kernel_summary(events, steps: int, wall_s: float) -> str:
    """One step's CUDA kernels: how many, their summed time against the
    step's wall time (a step far longer than its kernels is bound by the
    host's launches, not the GPU), and the share of compute kernels."""
    from torch.autograd import DeviceType

    # the profiler mirrors each CPU range (record_function: the module::
    # labels, Optimizer.step#...) on the GPU timeline as an annotation
    # spanning its kernels: not a kernel, and left out of the profiler's
    # own "Self CUDA time total" by the same flag
    kernels = [e for e in events if e.device_type == DeviceType.CUDA
               and not e.is_user_annotation]
    count = sum(e.count for e in kernels) / steps
    busy = sum(_time_attr(e, 'self') for e in kernels) / steps / 1e3
    compute = sum(
        _time_attr(e, 'self') for e in kernels
        if _COMPUTE_KERNELS.search(e.key.lower())) / steps / 1e3
    wall = wall_s * 1e3
    rows = [['CUDA kernels and memory copies per step', f'{count:.0f}'],
            ['kernel time per step (ms, summed)', f'{busy:.2f}'],
            ['step wall time, unprofiled (ms, median)', f'{wall:.2f}'],
            ['GPU busy (kernel time / wall time)',
             f'{100 * busy / wall:.0f} %' if wall else 'n/a'],
            ['GEMM / conv / attention kernels (share of kernel time)',
             f'{100 * compute / busy:.0f} %' if busy else 'n/a'],
            ['mean kernel time (µs)',
             f'{1e3 * busy / count:.1f}' if count else 'n/a']]
    return markdown_table(['Per training step', 'value'], rows)


def profile_model(args, device: torch.device, report: Report) -> None:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    models = resolve_models([args.profile], args.quick)
    (name, config), = models.items()
    model, _, step, inputs, samples = _prepare(config, args, device)

    handles = []
    for module in ([] if args.compile else model.modules()):
        mod = type(module).__module__
        if mod.startswith(('lect_mm', 'mmpretrain', 'mmcv')):
            label = f'module::{type(module).__name__}'

            def pre(m, _inp, label=label):
                m._bench_rf = record_function(label)
                m._bench_rf.__enter__()

            def post(m, _inp, _out):
                m._bench_rf.__exit__(None, None, None)

            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))

    activities = [ProfilerActivity.CPU]
    if device.type == 'cuda':
        activities.append(ProfilerActivity.CUDA)
    warm = 0 if args.quick else max(2, args.warmup)
    for _ in range(warm):
        step(inputs, samples)
    synchronize(device)
    if device.type == 'cuda':  # the step without the profiler's overhead
        wall = measure(functools.partial(step, inputs, samples), device,
                       warmup=0, repeats=max(3, args.profile_steps))
    with profile(activities=activities) as prof:
        for _ in range(args.profile_steps):
            step(inputs, samples)
        synchronize(device)
    for h in handles:
        h.remove()

    events = prof.key_averages()
    report.add(f'### Profile of {name} ({_settings(args)}), '
               f'{args.profile_steps} training steps')
    report.add()
    if device.type == 'cuda':
        report.add(_kernel_summary(events, args.profile_steps,
                                   wall.median))
        report.add()
    sort_keys = ['self_cpu_time_total']
    if device.type == 'cuda':
        sort_keys.insert(0, 'self_device_time_total' if hasattr(
            events[0], 'self_device_time_total') else 'self_cuda_time_total')
    for key in sort_keys:
        report.add(f'Top {args.top} ops by {key}:')
        report.add()
        report.add('```')
        report.add(events.table(sort_by=key, row_limit=args.top,
                                max_name_column_width=60))
        report.add('```')
        report.add()

    # inclusive time per module class: where the time goes, block by block
    rows = []
    for ev in events:
        # the CPU range: its device time is that of the kernels it launched
        # (its GPU-timeline mirror spans idle gaps too)
        if (not ev.key.startswith('module::')
                or ev.device_type != DeviceType.CPU):
            continue
        rows.append((ev.key[len('module::'):], ev.count,
                     ev.cpu_time_total / 1e3, _time_attr(ev, 'total') / 1e3))
    rows.sort(key=lambda r: (r[3], r[2]), reverse=True)
    report.add('Forward time by module class (inclusive, summed over all '
               'instances and profiled steps; nested classes count in '
               'their parents too; CUDA: the time of the kernels each '
               'launched):')
    report.add()
    headers = ['Module class', 'Calls', 'CPU total ms']
    if device.type == 'cuda':
        headers.append('CUDA kernels ms')
    report.add(
        markdown_table(headers, [[r[0], r[1], f'{r[2]:.2f}', f'{r[3]:.2f}'
                                  ][:len(headers)] for r in rows]))
    report.add()
    del model, step
    _release(device, args.compile)


def main(argv=None) -> Report:
    args = parse_args(argv)
    device = setup(args)
    report = Report('train_throughput', args.out)
    if args.profile and args.profile not in MODEL_CONFIGS and \
            not args.profile.endswith('.py'):
        raise ValueError(f'--profile: unknown model {args.profile!r}; '
                         f'choose from {list(MODEL_CONFIGS)} or a config')
    report.add(machine_header(device, 'Training throughput'))
    if args.profile:
        profile_model(args, device, report)
    elif args.variants:
        variants_table(args, device, report)
    elif args.compile_speedup:
        compile_speedup_table(args, device, report)
    else:
        throughput_table(args, device, report)
    report.save()
    return report


if __name__ == '__main__':
    main()
