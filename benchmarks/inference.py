"""Inference throughput of the report's models (Table 2).

Images/s at batch 1 (latency-bound) and batch 64 (throughput-bound), in
fp32 and under bf16 autocast, eval mode, ``torch.inference_mode``, 224×224
random input on the device (no data loading). Median and IQR over the timed
batches; the last column is the batch-64 fp32 rate relative to the report's
ResNet.

``--engine torch ort inductor`` prints instead one table of deployed
models (BatchNorms folded, ``lect_mm.export.prepare_for_export``) run by
each engine, all timed in turns at each batch size: torch eager, ONNX
Runtime (the graph of ``lect_mm.export.export_onnx`` with a dynamic batch,
every graph optimisation, ``--threads`` intra-op threads) and Inductor
(``torch.compile`` with freezing); by default the report's LeCT, LeCT v3
and ResNet beside timm's resnet18 and mobilevit_xxs (``timm/NAME`` takes
any timm model). ``--json`` keeps the figures for other reports (the cost
page of ``tools/benchmark_accuracy.py --latency``).

``--deploy-speedup`` prints instead each model eager, deployed (its
backbone's conv → BatchNorm pairs folded by ``switch_to_deploy()``, where
it has one) and compiled (the deployed model's backbone and neck under
``torch.compile`` with Inductor's freezing, which folds the weights into
the compiled code), all timed in turns, fp32, at the largest
``--batch-sizes``.

Examples::

    python benchmarks/inference.py
    python benchmarks/inference.py --models LeCT ViT --channels-last
    python benchmarks/inference.py --deploy-speedup --batch-sizes 16
    python benchmarks/inference.py --engine torch ort inductor \
        --batch-sizes 1 16 --threads 2
    python benchmarks/inference.py --quick
"""
import argparse
import copy
import functools
import gc
import json
import os.path as osp
import sys
import traceback
import warnings
from typing import Callable, Dict, List

import torch
from common.cli import (add_model_args, layout_flags, new_parser,
                        resolve_models, setup)
from common.models import (QUICK_MODELS, REFERENCE_MODEL, build_classifier,
                           compile_model, inference_call)
from common.report import Report, machine_header, markdown_table
from common.timing import measure, measure_interleaved

from lect_mm.analysis import count_params

#: The ways ``--deploy-speedup`` runs a model.
DEPLOY_MODES = ('eager', 'deployed', 'compiled')
#: ``--engine``: what runs the deployed model.
ENGINES = ('torch', 'ort', 'inductor')
#: The models of ``--engine`` by default: the report's LeCT v1 and v3 and
#: its ResNet, and the small timm models users compare them with.
ENGINE_MODELS = ('LeCT', 'LeCT v3', 'ResNet', 'timm/resnet18',
                 'timm/mobilevit_xxs')


def parse_args(argv=None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    add_model_args(parser)
    parser.add_argument('--batch-sizes', nargs='+', type=int,
                        default=[1, 64])
    parser.add_argument('--precisions', nargs='+', default=['fp32', 'bf16'],
                        choices=['fp32', 'bf16'])
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--warmup', type=int, default=5)
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--channels-last', action='store_true')
    parser.add_argument('--compile', action='store_true',
                        help='torch.compile the backbone and neck')
    parser.add_argument(
        '--deploy-speedup', action='store_true',
        help='instead of the table, time each model eager, deployed and '
        'compiled (fp32, largest --batch-sizes) in turns')
    parser.add_argument(
        '--modes', nargs='+', default=list(DEPLOY_MODES),
        choices=DEPLOY_MODES,
        help='--deploy-speedup: the ways to run each model (--quick: '
        'eager deployed, as compiling takes minutes)')
    parser.add_argument(
        '--cpu-time', action='store_true',
        help='--deploy-speedup on the CPU: time CPU seconds of the process '
        '(process_time) instead of wall time, for single-threaded runs on '
        'a shared machine')
    parser.add_argument(
        '--engine', nargs='+', choices=ENGINES,
        help='instead of the table, time the deployed models in each of '
        'these engines, in turns (default models: ' +
        ', '.join(ENGINE_MODELS) + ')')
    parser.add_argument(
        '--json', metavar='FILE',
        help='--engine: also write the figures to FILE (per model, the ms '
        'of a batch of the first engine at the first batch size)')
    parser.add_argument(
        '--turn', type=int, default=3,
        help='--deploy-speedup: timed batches in a row per model and mode '
        '(after one untimed)')
    args = parser.parse_args(argv)
    args.command = 'python benchmarks/inference.py ' + ' '.join(
        sys.argv[1:] if argv is None else argv)
    if args.engine and (args.deploy_speedup or args.compile
                        or args.channels_last):
        parser.error('--engine compares its own engines; leave out '
                     '--deploy-speedup, --compile and --channels-last')
    if args.deploy_speedup and (args.compile or args.channels_last):
        parser.error('--deploy-speedup compares its own modes; leave out '
                     '--compile and --channels-last')
    if args.quick:
        args.batch_sizes = [1, 2]
        args.img_size = 64
        args.warmup, args.repeats = 1, 1
        if '--modes' not in (argv if argv is not None else sys.argv):
            args.modes = ['eager', 'deployed']
    return args


def run_model(config: str, args, device: torch.device) -> Dict:
    model = build_classifier(config).to(device).eval()
    params = count_params(model)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if args.compile:
        compile_model(model)
    rates = {}
    for bs in args.batch_sizes:
        x = torch.randn(bs, 3, args.img_size, args.img_size, device=device)
        if args.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        for prec in args.precisions:
            rates[(bs, prec)] = measure(
                inference_call(model, x, device, prec == 'bf16'), device,
                args.warmup, args.repeats)
    del model
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    if args.compile:
        torch._dynamo.reset()
    return dict(params=params, stats=rates)


def _deployed(model: torch.nn.Module) -> bool:
    """Fold the backbone's conv → BatchNorm pairs if it can; whether it
    did."""
    switch = getattr(model.backbone, 'switch_to_deploy', None)
    if switch is None:
        return False
    switch()
    return True


def _frozen(call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``call()`` with Inductor's freezing on (read when the first call
    compiles)."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch(freezing=True):
        return call()


def deploy_speedup_table(args, device: torch.device,
                         report: Report) -> None:
    """Each model eager, deployed and compiled, all timed in turns."""
    bs = max(args.batch_sizes)
    x = torch.randn(bs, 3, args.img_size, args.img_size, device=device)
    calls, cells, names = [], {}, []
    for name, config in resolve_models(args.models, args.quick).items():
        print(f'[{name}] {", ".join(args.modes)}', file=sys.stderr,
              flush=True)
        eager = build_classifier(config).to(device).eval()
        deployed = copy.deepcopy(eager)
        folds = _deployed(deployed)
        names.append((name, eager))
        for mode in args.modes:
            if mode == 'deployed' and not folds:
                continue  # the same model as eager
            model = eager if mode == 'eager' else copy.deepcopy(deployed)
            call = inference_call(model, x, device)
            if mode == 'compiled':
                compile_model(model)
                call = functools.partial(_frozen, call)
            cells[(name, mode)] = len(calls)
            calls.append(call)
    stats = measure_interleaved(calls, device, args.warmup, args.repeats,
                                args.turn, args.cpu_time)

    def rate(name, mode):
        i = cells.get((name, mode))
        return stats[i].rate(bs) if i is not None else '–'

    def seconds(name, mode):
        """Median seconds of a batch; a model that does not fold runs
        'deployed' as 'eager'."""
        i = cells.get((name, mode), cells.get((name, 'eager')))
        return stats[i].median if i is not None else None

    def speedup(time, ref_time):
        return f'{ref_time / time:.2f}' if time and ref_time else '–'

    first, last = args.modes[0], args.modes[-1]
    rows = []
    for name, eager in names:
        row = [name, f'{count_params(eager) / 1e6:.3f}']
        row += [rate(name, m) for m in args.modes]
        row += [
            speedup(seconds(name, m), seconds(name, first))
            if (name, m) in cells else '–' for m in args.modes[1:]
        ]
        row += [
            speedup(seconds(name, m), seconds(REFERENCE_MODEL, m))
            for m in dict.fromkeys((first, last))
        ]
        rows.append(row)
    report.add(f'### Inference images/s, {", ".join(args.modes)} '
               f'(batch {bs}, {args.img_size}², fp32, inference_mode)')
    report.add()
    report.add(markdown_table(
        ['Model', 'Params (M)'] + [f'{m} img/s' for m in args.modes] +
        [f'{m} × {first}' for m in args.modes[1:]] +
        [f'{m} × {REFERENCE_MODEL}' for m in dict.fromkeys((first, last))],
        rows))
    report.add()
    report.add(
        'Images/s' + (' of CPU time (process_time)' if args.cpu_time else
                      '') + ', median [IQR] over '
        f'{args.repeats} timed batches after {args.warmup} warm-up batches '
        f'(compilation included), all models and modes timed in turns of '
        f'one untimed and {args.turn} timed batches. deployed: the '
        "backbone's switch_to_deploy() (– where it has none: the same as "
        "eager); compiled: the deployed model's backbone and neck under "
        "torch.compile with Inductor's freezing.")
    report.add()


class Logits(torch.nn.Module):
    """A classifier as ``forward(x) -> logits``: mmpretrain's in ``tensor``
    mode, timm's as they are."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self.model, 'data_preprocessor'):
            return self.model(x, mode='tensor')
        return self.model(x)


def deployed_model(config: str) -> torch.nn.Module:
    """The deployed classifier of a config or of ``timm/NAME`` (10
    classes, no pretrained weights)."""
    from lect_mm.export import prepare_for_export
    if config.startswith('timm/'):
        import timm
        model = timm.create_model(config[5:], pretrained=False,
                                  num_classes=10)
    else:
        model = build_classifier(config)
    return prepare_for_export(Logits(model))


def engine_call(model: torch.nn.Module, engine: str, onnx_path: str,
                threads: int) -> Callable[[torch.Tensor], object]:
    """A call of ``model`` on a batch in ``engine``."""
    if engine == 'ort':
        from lect_mm.export import ort_session
        session = ort_session(onnx_path, threads)
        return lambda x: session.run(None, {'x': x.numpy()})
    if engine == 'inductor':
        compiled = torch.compile(model)

        def call(x):
            with torch.inference_mode():
                return _frozen(lambda: compiled(x))
        return call

    def eager(x):
        with torch.inference_mode():
            return model(x)
    return eager


def engine_table(args, device: torch.device, report: Report) -> dict:
    """The deployed models in each engine, timed in turns per batch
    size."""
    import tempfile

    from lect_mm.export import export_onnx
    if device.type != 'cpu':
        raise SystemExit('--engine times CPU engines; use --device cpu')
    threads = torch.get_num_threads()
    models = resolve_models(args.models, args.quick,
                            ENGINE_MODELS if not args.quick else
                            QUICK_MODELS, timm_models=True)
    calls, params = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in models.items():
            print(f'[{name}] {", ".join(args.engine)}', file=sys.stderr,
                  flush=True)
            model = deployed_model(config)
            params[name] = count_params(model)
            path = osp.join(tmp, f'{len(calls)}.onnx')
            if 'ort' in args.engine:
                with warnings.catch_warnings():
                    warnings.simplefilter('ignore')
                    export_onnx(model, path, (args.img_size, ) * 2,
                                dynamic='batch')
            for engine in args.engine:
                calls[name, engine] = engine_call(model, engine, path,
                                                  threads)
        stats = {}
        for bs in args.batch_sizes:
            x = torch.randn(bs, 3, args.img_size, args.img_size)
            keys = list(calls)
            timed = measure_interleaved(
                [functools.partial(calls[k], x) for k in keys], device,
                args.warmup, args.repeats, args.turn)
            stats.update({(*k, bs): t for k, t in zip(keys, timed)})

    def ratio(name, engine, bs, ref_name, ref_engine):
        ref = stats.get((ref_name, ref_engine, bs))
        return (f'{ref.median / stats[name, engine, bs].median:.2f}'
                if ref else '–')

    cols = [(e, bs) for e in args.engine for bs in args.batch_sizes]
    rows = []
    for name in models:
        row = [name, f'{params[name] / 1e6:.3f}']
        row += [stats[name, e, bs].rate(bs) for e, bs in cols]
        row += [ratio(name, e, bs, REFERENCE_MODEL, e) for e, bs in cols]
        row += [ratio(name, e, bs, name, 'torch') for e, bs in cols
                if e != 'torch' and 'torch' in args.engine]
        rows.append(row)
    report.add(f'### Deployed models by engine (images/s, {args.img_size}², '
               f'fp32, {threads} thread{"s" if threads > 1 else ""})')
    report.add()
    report.add(markdown_table(
        ['Model', 'Params (M)'] + [f'{e} bs {bs}' for e, bs in cols] +
        [f'{e} bs {bs} × {REFERENCE_MODEL}' for e, bs in cols] +
        [f'{e} bs {bs} × torch' for e, bs in cols
         if e != 'torch' and 'torch' in args.engine], rows))
    report.add()
    setup_line = (
        f'Images/s, median [IQR] over {args.repeats} timed batches after '
        f'{args.warmup} warm-up batches, every model and engine timed in '
        f'turns of one untimed and {args.turn} timed batches. Deployed: '
        'BatchNorms folded (lect_mm.export.prepare_for_export); ort: ONNX '
        'Runtime, the graph of lect_mm.export.export_onnx (opset 23, a '
        'dynamic batch), every graph optimisation; inductor: torch.compile '
        'with freezing.')
    report.add(setup_line)
    report.add()
    engine_names = dict(torch='torch eager', ort='ONNX Runtime (the graph '
                        'of lect_mm.export.export_onnx, opset 23)',
                        inductor='Inductor (torch.compile, freezing)')
    figures = dict(
        setup=f'median ms of one batch of {args.batch_sizes[0]} at '
        f'{args.img_size}², fp32, deployed (BatchNorms folded), in '
        f'{engine_names[args.engine[0]]} with {threads} thread(s), over '
        f'{args.repeats} timed calls after {args.warmup} warm-up calls, '
        'every model timed in turns (benchmarks/inference.py --engine)',
        command=args.command, engine=args.engine[0],
        batch=args.batch_sizes[0],
        models={name: dict(
            ms=stats[name, args.engine[0],
                     args.batch_sizes[0]].median * 1e3,
            params=params[name],
            images_per_s={f'{e} bs {bs}': bs / stats[name, e, bs].median
                          for e, bs in cols}) for name in models})
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(figures, f, indent=1)
    return figures


def main(argv=None) -> Report:
    args = parse_args(argv)
    device = setup(args)
    report = Report('inference', args.out)
    report.add(machine_header(device, 'Inference throughput'))
    if args.engine:
        engine_table(args, device, report)
        report.save()
        return report
    if args.deploy_speedup:
        deploy_speedup_table(args, device, report)
        report.save()
        return report
    models = resolve_models(args.models, args.quick)
    results = {}
    for name, config in models.items():
        print(f'[{name}] {config}', file=sys.stderr, flush=True)
        try:
            results[name] = run_model(config, args, device)
        except Exception as err:  # noqa: BLE001  (report and go on)
            traceback.print_exc()
            results[name] = dict(error=f'{type(err).__name__}: {err}')

    keys = [(bs, p) for bs in args.batch_sizes for p in args.precisions]
    big = (max(args.batch_sizes), args.precisions[0])
    ref = results.get(REFERENCE_MODEL, {}).get('stats', {}).get(big)
    rows: List[list] = []
    for name, res in results.items():
        if 'error' in res:
            rows.append([name, 'failed: ' + res['error'][:120]] + [''] *
                        len(keys) + [''])
            continue
        cells = [res['stats'][k].rate(k[0]) for k in keys]
        ratio = (f'{ref.median / res["stats"][big].median:.2f}'
                 if ref else 'n/a')
        rows.append([name, f'{res["params"] / 1e6:.3f}'] + cells + [ratio])
    flags = [f'{args.img_size}²', 'eval', 'inference_mode']
    flags += layout_flags(args)
    report.add(f'### Inference images/s ({", ".join(flags)})')
    report.add()
    report.add(
        markdown_table(['Model', 'Params (M)'] +
                       [f'bs {bs} {p}' for bs, p in keys] +
                       [f'× {REFERENCE_MODEL} (bs {big[0]} {big[1]})'],
                       rows))
    report.add()
    report.add(f'Images/s, median [IQR] over {args.repeats} timed batches '
               f'after {args.warmup} warm-up batches; bf16 = autocast.')
    report.add()
    report.save()
    return report


if __name__ == '__main__':
    main()
