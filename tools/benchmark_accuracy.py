"""Train and test the LeCT report's model set on Fashion-MNIST; write a table.

Every model is trained by ``tools/train.py`` (mmpretrain's runner, the path
a user's run takes) and its last checkpoint tested on the 10,000 test images
by ``tools/test.py``, one after the other, under identical settings. The
result is ``<out-dir>/fashion_mnist_<protocol>.md`` (top-1, top-5, params,
FLOPs, images/s, training time, epochs, resolution, seed, commit) and
``<out-dir>/fashion_mnist_<protocol>.png`` (validation top-1 and training
loss per epoch of all models).

Protocols (configs in ``configs/fashion_mnist/``):

- ``cpu``: ``*_fashion_mnist_cpu.py``. 64x64 input, 10,000 training
  images, RandomCrop + flip, 8 epochs; fits a 2-core CPU. CCT-7/3x1 runs at
  its native 32x32 and is left out of the default set (``--models`` adds it).
- ``gpu``: ``*_fashion_mnist.py``. The report's 224x224 input and
  augmentation (RandAugment) on all 60,000 training images, 5 epochs, bf16
  (``--amp``); models in the order LeCT v1, ResNet, then the rest.

The run can be interrupted at any point: a model with a ``result.json`` in
its work dir is not run again, and an unfinished model resumes from its last
checkpoint (``tools/train.py --resume``).

Example::

    apt-get install -y dataset-fashion-mnist
    python tools/benchmark_accuracy.py --protocol cpu
"""
import argparse
import datetime
import json
import os
import os.path as osp
import platform
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG_DIR = osp.join(REPO, 'configs', 'fashion_mnist')

#: name -> label, in the order of the tables.
MODELS = {
    'lect_v1': 'LeCT (v1)',
    'resnet': 'ResNet',
    'lect_v2': 'LeCT v2',
    'lect_v3': 'LeCT v3',
    'ceit_gap': 'CeiT (GAP head)',
    'ceit_ref': "CeiT (author's file)",
    'convnext': 'ConvNeXt',
    'vit': 'ViT',
    'cct_7_3x1': 'CCT-7/3x1',
}

PROTOCOLS = {
    'cpu': dict(
        suffix='_fashion_mnist_cpu.py',
        models=[m for m in MODELS if m != 'cct_7_3x1'],
        train_args=[],
        summary='64x64 input (CCT: 32x32), the first 10,000 training images, '
        'RandomCrop(padding 4) + flip, batch 64, 8 epochs of the report\'s '
        'AdamW + cosine schedule; validation on 2,000 test images per '
        'epoch, final test on all 10,000.'),
    'gpu': dict(
        suffix='_fashion_mnist.py',
        models=list(MODELS),
        train_args=['--amp'],
        summary='the report\'s 224x224 input (CCT: 32x32) and augmentation '
        '(RandomCrop + flip + RandAugment, resize on the device) on all '
        '60,000 training images, batch 64, bf16, 5 epochs of the report\'s '
        'AdamW + cosine schedule; test on all 10,000.'),
}


def config_path(protocol: str, model: str) -> str:
    """The config of ``model`` under ``protocol``."""
    return osp.join(CONFIG_DIR, model + PROTOCOLS[protocol]['suffix'])


def git_commit() -> str:
    """Short commit of the repo, ``+changes`` when the tree is dirty."""
    try:
        commit = subprocess.check_output(
            ['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO,
            text=True, stderr=subprocess.DEVNULL).strip()
        dirty = subprocess.check_output(
            ['git', 'status', '--porcelain', '--untracked-files=no'],
            cwd=REPO, text=True, stderr=subprocess.DEVNULL).strip()
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'
    return commit + ('+changes' if dirty else '')


def input_size(cfg) -> int:
    """The side of the square the model sees: the device resize, else the
    test pipeline's ``Resize``, else the 28 of Fashion-MNIST."""
    size = cfg.get('data_preprocessor', {}).get('size')
    if size is not None:
        return int(size if isinstance(size, int) else size[0])
    for t in cfg.test_dataloader.dataset.pipeline:
        if t['type'] == 'Resize':
            scale = t['scale']
            return int(scale if isinstance(scale, int) else scale[0])
    return 28


def describe(config: str, cfg_options: Optional[dict]) -> dict:
    """Params, FLOPs (one image), input size, epochs, training images and
    seed of a config."""
    from mmengine.config import Config
    from mmpretrain.registry import DATASETS

    from lect_mm.analysis import build_model, count_flops, count_params

    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    size = input_size(cfg)
    model = build_model(config, cfg_options)
    train_set = DATASETS.build(
        dict(cfg.train_dataloader.dataset, pipeline=[], lazy_init=False))
    return dict(
        params=count_params(model),
        flops=count_flops(model, (3, size, size)),
        resolution=size,
        epochs=int(cfg.train_cfg.max_epochs),
        train_images=len(train_set),
        seed=cfg.get('randomness', {}).get('seed'))


def _cfg_args(cfg_options: Optional[Sequence[str]]) -> List[str]:
    return ['--cfg-options', *cfg_options] if cfg_options else []


class RunFailed(RuntimeError):
    """A step that failed or was interrupted, with the seconds it ran."""

    def __init__(self, message: str, seconds: float):
        super().__init__(message)
        self.seconds = seconds


def _run(cmd: List[str], log_path: str) -> float:
    """Run ``cmd``, teeing its output to ``log_path``; return the seconds.

    Raises:
        RunFailed: on a non-zero exit or an interrupt (Ctrl-C), carrying the
            seconds it ran.
    """
    start = time.perf_counter()
    with open(log_path, 'a') as log:
        log.write(f'\n$ {" ".join(cmd)}\n')
        log.flush()
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        try:
            for line in proc.stdout:
                log.write(line)
                sys.stdout.write(line)
            proc.wait()
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
            raise RunFailed(f'{" ".join(cmd)} interrupted',
                            time.perf_counter() - start)
    if proc.returncode:
        raise RunFailed(
            f'{" ".join(cmd)} failed with exit status {proc.returncode}; '
            f'see {log_path}', time.perf_counter() - start)
    return time.perf_counter() - start


def last_checkpoint(work_dir: str) -> str:
    """The checkpoint named in ``work_dir/last_checkpoint``."""
    pointer = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(pointer):
        raise FileNotFoundError(f'{pointer} is missing: training wrote no '
                                'checkpoint')
    with open(pointer) as f:
        return f.read().strip()


def run_model(protocol: str, model: str, work_root: str,
              cfg_options: Optional[Sequence[str]],
              parsed_options: Optional[dict]) -> dict:
    """Train and test one model unless its ``result.json`` exists."""
    work_dir = osp.join(work_root, model)
    result_path = osp.join(work_dir, 'result.json')
    if osp.isfile(result_path):
        with open(result_path) as f:
            result = json.load(f)
        print(f'[{model}] done earlier: top-1 {result["top1"]:.2f}')
        return result
    os.makedirs(work_dir, exist_ok=True)
    config = config_path(protocol, model)
    log_path = osp.join(work_dir, 'benchmark.log')

    # Seconds of training, summed over interrupted attempts.
    times_path = osp.join(work_dir, 'train_seconds.json')
    seconds = []
    if osp.isfile(times_path):
        with open(times_path) as f:
            seconds = json.load(f)
    train_cmd = [
        sys.executable, 'tools/train.py', config, '--work-dir', work_dir,
        '--resume', *PROTOCOLS[protocol]['train_args'],
        *_cfg_args(cfg_options)
    ]
    print(f'[{model}] training: {" ".join(train_cmd[1:])}')
    try:
        seconds.append(_run(train_cmd, log_path))
    except RunFailed as e:
        seconds.append(e.seconds)
        raise
    finally:
        with open(times_path, 'w') as f:
            json.dump(seconds, f)

    checkpoint = last_checkpoint(work_dir)
    metrics_path = osp.join(work_dir, 'test_metrics.json')
    test_cmd = [
        sys.executable, 'tools/test.py', config, checkpoint, '--work-dir',
        osp.join(work_dir, 'test'), '--out', metrics_path, '--out-item',
        'metrics', *_cfg_args(cfg_options)
    ]
    print(f'[{model}] testing: {" ".join(test_cmd[1:])}')
    _run(test_cmd, log_path)
    with open(metrics_path) as f:
        metrics = json.load(f)

    info = describe(config, parsed_options)
    train_seconds = sum(seconds)
    result = dict(
        model=model,
        label=MODELS[model],
        config=osp.relpath(config, REPO),
        checkpoint=osp.relpath(checkpoint, REPO)
        if checkpoint.startswith(REPO) else checkpoint,
        top1=float(metrics['accuracy/top1']),
        top5=float(metrics['accuracy/top5']),
        train_seconds=train_seconds,
        train_attempts=len(seconds),
        images_per_s=info['epochs'] * info['train_images'] / train_seconds,
        commit=git_commit(),
        **info)
    with open(result_path, 'w') as f:
        json.dump(result, f, indent=1)
    print(f'[{model}] top-1 {result["top1"]:.2f}, top-5 '
          f'{result["top5"]:.2f}, {train_seconds / 60:.1f} min')
    return result


def plot(results: List[dict], work_root: str, out_png: str) -> str:
    """Convergence plot of all models; returns the per-model summary."""
    cmd = [
        sys.executable, 'tools/analysis_tools/plot_convergence.py',
        *[osp.join(work_root, r['model']) for r in results], '--labels',
        *[r['label'] for r in results], '--metric', 'accuracy/top1',
        '--threshold', '80', '--out', out_png, '--title',
        'Fashion-MNIST: validation top-1 and training loss per epoch'
    ]
    out = subprocess.run(
        cmd, cwd=REPO, check=True, capture_output=True, text=True).stdout
    return out.split('\nsaved ')[0].strip()


def machine() -> str:
    """One line: the device the runs used and the software."""
    import torch
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
    else:
        name = platform.machine()
        if osp.isfile('/proc/cpuinfo'):
            with open('/proc/cpuinfo') as f:
                names = [ln.split(':', 1)[1].strip() for ln in f
                         if ln.startswith('model name')]
            name = names[0] if names else name
        device = f'CPU ({name}, {os.cpu_count()} logical cores)'
    return (f'{device}; Python {platform.python_version()}, torch '
            f'{torch.__version__}')


def write_table(protocol: str, results: List[dict], convergence: str,
                out_md: str, out_png: str, command: str,
                wall_seconds: Optional[float]) -> str:
    """Write the markdown report; returns its text."""
    rows = [
        '| model | top-1 | top-5 | params (M) | FLOPs (G) | resolution | '
        'epochs | train images | training time (min) | images/s | seed |',
        '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for r in sorted(results, key=lambda r: -r['top1']):
        rows.append(
            f'| {r["label"]} | {r["top1"]:.2f} | {r["top5"]:.2f} | '
            f'{r["params"] / 1e6:.4f} | {r["flops"] / 1e9:.4f} | '
            f'{r["resolution"]}² | {r["epochs"]} | {r["train_images"]:,} | '
            f'{r["train_seconds"] / 60:.1f} | {r["images_per_s"]:.0f} | '
            f'{r["seed"]} |')
    commits = sorted({r['commit'] for r in results})
    total = sum(r['train_seconds'] for r in results)
    lines = [
        f'# Fashion-MNIST, `{protocol}` protocol',
        '',
        f'Protocol: {PROTOCOLS[protocol]["summary"]}',
        '',
        f'Command: `{command}`',
        '',
        f'Measured on: {machine()}; commit {", ".join(commits)}; '
        f'{datetime.date.today().isoformat()}.',
        '',
        'Top-1/top-5: the last checkpoint on the 10,000 test images '
        '(`tools/test.py`). Training time: wall time of `tools/train.py` '
        '(start-up and per-epoch validation included); images/s = epochs x '
        'training images / training time. FLOPs: one image at the '
        'resolution, one multiply-add = one FLOP, attention counted.',
        '',
        *rows,
        '',
        f'Training time of all models: {total / 60:.1f} min' +
        (f'; the whole command: {wall_seconds / 60:.1f} min.'
         if wall_seconds else '.'),
        '',
        f'![convergence]({osp.basename(out_png)})',
        '',
        'Validation top-1 (2,000 test images in the `cpu` protocol) per '
        'epoch:',
        '',
        convergence,
        '',
    ]
    text = '\n'.join(lines)
    with open(out_md, 'w') as f:
        f.write(text)
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Train and test the report\'s model set on '
        'Fashion-MNIST and write the results table')
    parser.add_argument(
        '--protocol', choices=sorted(PROTOCOLS), required=True,
        help='cpu: 64x64, 10k images, 8 epochs; gpu: the report\'s 224x224 '
        'and augmentation, 60k images, 5 epochs')
    parser.add_argument(
        '--models', nargs='+', choices=list(MODELS),
        help='models to run, in this order (default: the protocol\'s set)')
    parser.add_argument(
        '--work-dir',
        help='root of the per-model work dirs; default '
        'work_dirs/fashion_mnist_<protocol>')
    parser.add_argument(
        '--out-dir', default=osp.join(REPO, 'docs', 'results'),
        help='where the markdown table and the plot go')
    parser.add_argument(
        '--cfg-options', nargs='+', metavar='KEY=VALUE',
        help='passed to tools/train.py and tools/test.py of every model')
    return parser.parse_args(argv)


def main(argv=None) -> Dict[str, dict]:
    args = parse_args(argv)
    start = time.perf_counter()
    models = args.models or PROTOCOLS[args.protocol]['models']
    work_root = osp.abspath(
        args.work_dir
        or osp.join(REPO, 'work_dirs', f'fashion_mnist_{args.protocol}'))
    parsed_options = None
    if args.cfg_options:
        from mmengine.config import DictAction
        parsed_options = {}
        for item in args.cfg_options:
            key, value = item.split('=', 1)
            parsed_options[key] = DictAction._parse_iterable(value)
    os.makedirs(work_root, exist_ok=True)
    wall_path = osp.join(work_root, 'wall_seconds.json')
    earlier = 0.0
    if osp.isfile(wall_path):
        with open(wall_path) as f:
            earlier = json.load(f)
    results = {}
    try:
        for model in models:
            results[model] = run_model(args.protocol, model, work_root,
                                       args.cfg_options, parsed_options)
    finally:
        with open(wall_path, 'w') as f:
            json.dump(earlier + time.perf_counter() - start, f)
    with open(wall_path) as f:
        wall = json.load(f)

    os.makedirs(args.out_dir, exist_ok=True)
    stem = osp.join(args.out_dir, f'fashion_mnist_{args.protocol}')
    ordered = [results[m] for m in models]
    convergence = plot(ordered, work_root, stem + '.png')
    command = 'python tools/benchmark_accuracy.py ' + ' '.join(
        sys.argv[1:] if argv is None else argv)
    text = write_table(args.protocol, ordered, convergence, stem + '.md',
                       stem + '.png', command, wall)
    print(text)
    return results


if __name__ == '__main__':
    main()
