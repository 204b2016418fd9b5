"""Train and test the LeCT report's model set on Fashion-MNIST; write a report.

Every run is ``tools/train.py`` (mmpretrain's runner, the path a user's run
takes) followed by ``tools/test.py`` of its last checkpoint on the 10,000
test images, one after the other, under identical settings. A run is one
(model, training-set size, seed):

- ``--seeds 0 1 2`` repeats each model with other seeds (``randomness.seed``:
  initialisation, shuffling, augmentation, dropout), so that the report can
  say which differences exceed the spread between seeds;
- ``--train-images 1000 3000`` trains on the first N training images for
  the same number of optimizer steps as the protocol's own size (more
  epochs, validation and checkpoints at the same number of points), so that
  accuracy can be read against training-set size at equal compute.

- ``--models timm/NAME`` trains any timm model (no pretrained weights)
  through mmpretrain's ``TimmClassifier`` under the same protocol, with the
  report's lr of its kind (6e-3 for a pure convnet, 1e-3 with attention);
- ``--budget cpu-time|flops --budget-ref MODEL [--budget-scale X ...]``
  gives each model the epochs whose training cost equals X times the
  reference's protocol run: CPU seconds per step measured by two short
  calibration runs (kept in ``calibration.json``), or training FLOPs per
  step; ``--lr-scale`` multiplies the lr; ``--holdout N`` validates and
  scores on the last N of the protocol's training images, never the test
  set; ``--cost-report`` writes ``fashion_mnist_cost.md`` from such runs
  (equal CPU time and FLOPs, the budget curve, the lr check, the Pareto
  plots), ``--import-runs`` takes a page's runs and calibration files in.

The report, ``<out-dir>/fashion_mnist_<protocol>.md``, is built from every
finished run under the work dir (whichever command ran it): the seeds table
(mean ± standard deviation of top-1 at the protocol's size), the pairs the
LeCT report ranks with whether each difference exceeds the seeds' spread,
accuracy against training-set size, and three plots: convergence
(``.png``), data efficiency (``_data_efficiency.png``) and accuracy against
training time (``_cost.png``).

Protocols (configs in ``configs/fashion_mnist/``):

- ``cpu``: ``*_fashion_mnist_cpu.py``. 64x64 input, the first 10,000
  training images, RandomCrop + flip, 8 epochs (1,256 steps of batch 64);
  fits a 2-core CPU. CCT-7/3x1 runs at its native 32x32 and is left out of
  the default set (``--models`` adds it).
- ``cpu112``: ``*_fashion_mnist_cpu112.py``. The ``cpu`` protocol at
  112x112 input, with LeCT's pooled grids by the report's rule (4x4, 4x4 and
  the whole 7x7 map of stage 3); LeCT v1, ResNet, LeCT v3 and CeiT (GAP
  head) by default, the ablation and ViT on request. The report of the
  ``cpu`` and ``cpu112`` runs together (a table per input size, top-1
  against input size): ``--resolution-report``.
- ``gpu``: ``*_fashion_mnist.py``. The report's 224x224 input and
  augmentation (RandAugment) on all 60,000 training images, 5 epochs, bf16
  (``--amp``); models in the order LeCT v1, ResNet, then the rest.

The runs can be interrupted at any point: a run with a ``result.json`` in
its work dir is not run again, and an unfinished run resumes from its last
checkpoint (``tools/train.py --resume``).

Example::

    apt-get install -y dataset-fashion-mnist
    python tools/benchmark_accuracy.py --protocol cpu
    python tools/benchmark_accuracy.py --protocol cpu --seeds 0 1 2 \\
        --models lect_v1 lect_v3 resnet ceit_gap vit lect_v1_ablation
    python tools/benchmark_accuracy.py --protocol cpu --budget cpu-time \\
        --models lect_v1 resnet timm/mobilevit_xxs --seeds 0 1 2
    python tools/benchmark_accuracy.py --protocol cpu --cost-report \\
        --latency latency.json
"""
import argparse
import datetime
import difflib
import functools
import json
import math
import os
import os.path as osp
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG_DIR = osp.join(REPO, 'configs', 'fashion_mnist')

#: name -> label, in the order of the tables.
MODELS = {
    'lect_v1': 'LeCT (v1)',
    'resnet': 'ResNet',
    'lect_v2': 'LeCT v2',
    'lect_v3': 'LeCT v3',
    'lect_v1_ablation': 'LeCT (v1) ablation',
    'ceit_gap': 'CeiT (GAP head)',
    'ceit_ref': "CeiT (author's file)",
    'convnext': 'ConvNeXt',
    'vit': 'ViT',
    'cct_7_3x1': 'CCT-7/3x1',
}

#: The LeCT report's top-1 (%) on CIFAR-100, CIFAR-10 and STL10: Table 2,
#: and Table 3 for the ablation (LeCT v1 without the convolutional skip,
#: parallel q/k/v). The report has one CeiT row, with a GAP head.
REPORT_TOP1 = {
    'lect_v1': (76.53, 94.41, 82.94),
    'lect_v2': (74.46, 93.97, 82.93),
    'lect_v3': (76.50, 94.40, 83.47),
    'lect_v1_ablation': (71.68, 92.31, 79.88),
    'ceit_gap': (74.98, 93.82, 80.53),
    'resnet': (69.68, 92.83, 79.91),
    'convnext': (71.84, 93.52, 73.95),
    'vit': (59.46, 79.53, 61.78),
}

PROTOCOLS = {
    'cpu': dict(
        suffix='_fashion_mnist_cpu.py',
        models=[
            m for m in MODELS if m not in ('cct_7_3x1', 'lect_v1_ablation')
        ],
        train_args=[],
        summary='64x64 input (CCT: 32x32), the first 10,000 training images, '
        'RandomCrop(padding 4) + flip, batch 64, 8 epochs of the report\'s '
        'AdamW + cosine schedule; validation on 2,000 test images per '
        'epoch, final test on all 10,000.'),
    'cpu112': dict(
        suffix='_fashion_mnist_cpu112.py',
        models=['lect_v1', 'resnet', 'lect_v3', 'ceit_gap'],
        available=['lect_v1', 'resnet', 'lect_v3', 'lect_v1_ablation',
                   'ceit_gap', 'vit'],
        train_args=[],
        summary='the `cpu` protocol at 112x112 input: the first 10,000 '
        'training images, RandomCrop(padding 4) + flip, batch 64, 8 epochs '
        'of the report\'s AdamW + cosine schedule; LeCT\'s pooled grids '
        '4x4, 4x4 and 7x7 (the report\'s rule); validation on 2,000 test '
        'images per epoch, final test on all 10,000.'),
    'gpu': dict(
        suffix='_fashion_mnist.py',
        models=[m for m in MODELS if m != 'lect_v1_ablation'],
        train_args=['--amp'],
        summary='the report\'s 224x224 input (CCT: 32x32) and augmentation '
        '(RandomCrop + flip + RandAugment, resize on the device) on all '
        '60,000 training images, batch 64, bf16, 5 epochs of the report\'s '
        'AdamW + cosine schedule; test on all 10,000.'),
}


#: ``--models timm/NAME`` trains ``timm.create_model(NAME)`` (no pretrained
#: weights) through mmpretrain's ``TimmClassifier``, under the protocol's
#: ``timm<suffix>`` config: the zoo's data, transforms, batch and schedule.
TIMM_PREFIX = 'timm/'

#: The LeCT report's learning rates (Appendix): 6e-3 for its pure convnets
#: (ResNet, ConvNeXt), 1e-3 for every model with attention. A timm model
#: takes the one of its kind (:func:`has_attention`).
REPORT_LR = dict(convnet=6e-3, attention=1e-3)


def is_timm(model: str) -> bool:
    return model.startswith(TIMM_PREFIX)


def label(model: str) -> str:
    """The model's name in tables and plots."""
    return MODELS.get(model) or 'timm ' + model[len(TIMM_PREFIX):]


def model_order(model: str) -> Tuple[int, str]:
    """Sort key: the zoo's models in table order, then timm's by name."""
    return (list(MODELS).index(model), '') if model in MODELS else (
        len(MODELS), model)


def model_dir(model: str) -> str:
    """The model's folder under the work dir (``timm/x`` -> ``timm-x``)."""
    return model.replace('/', '-')


def available_models(protocol: str) -> List[str]:
    """The zoo models with a config under ``protocol``."""
    return PROTOCOLS[protocol].get('available', list(MODELS))


def check_model(protocol: str, model: str) -> None:
    """Raise ValueError unless ``model`` can run under ``protocol``: a zoo
    model with a config there, or ``timm/NAME`` of a model timm knows."""
    if is_timm(model):
        config = osp.join(CONFIG_DIR, 'timm' + PROTOCOLS[protocol]['suffix'])
        if not osp.isfile(config):
            raise ValueError(
                f'--models: {model}: timm models have no config under the '
                f'{protocol!r} protocol ({osp.relpath(config, REPO)})')
        try:
            import timm
        except ImportError as e:
            raise ValueError(f'--models: {model} needs timm (pip install '
                             "'lect_mm[timm]')") from e
        name = model[len(TIMM_PREFIX):]
        if not timm.is_model(name):
            close = difflib.get_close_matches(name, timm.list_models(), 5)
            raise ValueError(f'--models: timm has no model {name!r}; '
                             f'similar names: {close}')
    elif model not in available_models(protocol):
        raise ValueError(
            f'--models: {model} has no config under the {protocol!r} '
            f'protocol; choose from {available_models(protocol)} or '
            f'{TIMM_PREFIX}NAME for any timm model')


def config_path(protocol: str, model: str) -> str:
    """The config of ``model`` under ``protocol``."""
    check_model(protocol, model)
    name = 'timm' if is_timm(model) else model
    return osp.join(CONFIG_DIR, name + PROTOCOLS[protocol]['suffix'])


def has_attention(model) -> bool:
    """Whether ``model``'s forward computes attention weights: a softmax or
    ``scaled_dot_product_attention`` among the torch functions it calls on
    one 64x64 image. Pure convnets (ResNet, MobileNet, squeeze-excite
    gates) call neither."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Calls(TorchFunctionMode):

        names = set()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.add(getattr(func, '__name__', ''))
            return func(*args, **(kwargs or {}))

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), Calls() as calls:
            model(torch.zeros(1, 3, 64, 64))
    finally:
        model.train(was_training)
    return any(n in ('softmax', 'scaled_dot_product_attention')
               for n in calls.names)


@functools.lru_cache(maxsize=None)
def model_options(protocol: str, model: str) -> Tuple[str, ...]:
    """The ``--cfg-options`` that select ``model`` in its config: a timm
    model's name, and the report's lr of its kind."""
    if not is_timm(model):
        return ()
    import timm
    name = model[len(TIMM_PREFIX):]
    net = timm.create_model(name, pretrained=False, num_classes=10)
    kind = 'attention' if has_attention(net) else 'convnet'
    return (f'model.model_name={name}',
            f'optim_wrapper.optimizer.lr={REPORT_LR[kind]}')


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


def parse_cfg_options(items: Optional[Sequence[str]]) -> dict:
    """``KEY=VALUE`` strings as mmengine's ``--cfg-options`` parses them."""
    from mmengine.config import DictAction
    parsed = {}
    for item in items or ():
        key, value = item.split('=', 1)
        parsed[key] = DictAction._parse_iterable(value)
    return parsed


def load_config(config: str, options: Optional[dict] = None):
    """The config with ``options`` merged in."""
    from mmengine.config import Config
    cfg = Config.fromfile(config)
    if options:
        cfg.merge_from_dict(options)
    return cfg


def train_set_size(cfg) -> int:
    """Images of the training set (``indices`` applied)."""
    from mmpretrain.registry import DATASETS

    import lect_mm  # noqa: F401  (registers FashionMNISTIdx)
    return len(
        DATASETS.build(
            dict(cfg.train_dataloader.dataset, pipeline=[],
                 lazy_init=False)))


def iters_per_epoch(images: int, batch_size: int, drop_last: bool) -> int:
    """Optimizer steps of one epoch over ``images`` on one process."""
    return images // batch_size if drop_last else math.ceil(
        images / batch_size)


class Schedule(NamedTuple):
    """The schedule of one training-set size at the protocol's steps."""
    train_images: int
    epochs: int
    steps: int
    val_interval: int


def schedule_for(cfg, base_images: int, train_images: int,
                 steps: Optional[int] = None) -> Schedule:
    """Epochs for ``train_images`` with ``steps`` optimizer steps (default:
    the steps of the protocol's run).

    The protocol trains ``max_epochs`` over ``base_images``; a size of
    ``train_images`` or a budget of ``steps`` gets the epoch count whose
    steps come closest, and validates (and saves) every
    ``round(epochs / max_epochs)`` epochs, so every run is validated about
    as often as the protocol's (and spends about as much on validation).
    """
    loader = cfg.train_dataloader
    batch, drop_last = loader.batch_size, loader.get('drop_last', False)
    base_epochs = int(cfg.train_cfg.max_epochs)
    base_steps = base_epochs * iters_per_epoch(base_images, batch, drop_last)
    per_epoch = iters_per_epoch(train_images, batch, drop_last)
    if per_epoch == 0:
        raise ValueError(
            f'--train-images {train_images} is smaller than one batch of '
            f'{batch} with drop_last=True: no training step.')
    if train_images == base_images and steps in (None, base_steps):
        return Schedule(train_images, base_epochs, base_steps,
                        int(cfg.train_cfg.get('val_interval', 1)))
    steps = base_steps if steps is None else steps
    epochs = max(1, math.floor(steps / per_epoch + 0.5))
    return Schedule(train_images, epochs, epochs * per_epoch,
                    max(1, math.floor(epochs / base_epochs + 0.5)))


# ----------------------------------------------------------------- budgets
#: ``--budget``: what the models are given equal amounts of.
BUDGETS = ('epochs', 'cpu-time', 'flops')

#: Training FLOPs of one image: the forward's and the backward's, which
#: computes two products (gradients of inputs and of weights) per forward
#: product. The factor is the same for every model, so budgets in FLOPs are
#: ratios of forward FLOPs.
TRAIN_FLOPS_PER_FORWARD = 3


def budget_steps(budget: str, scale: float, ref_steps: int,
                 ref_cost: float = 1., cost: float = 1.) -> int:
    """Optimizer steps whose cost equals ``scale`` x the reference run's.

    Args:
        budget: ``'epochs'`` (the reference's steps, whatever a step costs),
            ``'cpu-time'`` or ``'flops'`` (``ref_cost`` and ``cost``: the
            cost of one step of the reference model and of this model, in
            CPU seconds or training FLOPs).
        scale: the budget in units of the reference run's cost.
        ref_steps: the reference run's steps (the protocol's schedule).
    """
    if budget not in BUDGETS:
        raise ValueError(f'--budget: {budget!r}; choose from {BUDGETS}')
    if scale <= 0 or ref_cost <= 0 or cost <= 0:
        raise ValueError(f'budget_steps: scale {scale}, ref_cost {ref_cost} '
                         f'and cost {cost} must be positive')
    ratio = 1. if budget == 'epochs' else ref_cost / cost
    return max(1, math.floor(scale * ref_steps * ratio + 0.5))


def schedule_options(schedule: Schedule) -> List[str]:
    """The ``--cfg-options`` that train on ``schedule``."""
    return [
        f'train_dataloader.dataset.indices={schedule.train_images}',
        f'train_cfg.max_epochs={schedule.epochs}',
        f'train_cfg.val_interval={schedule.val_interval}',
        f'default_hooks.checkpoint.interval={schedule.val_interval}',
    ]


class Run(NamedTuple):
    """One training run of the report.

    ``epochs`` is None on the protocol's schedule for ``train_images``;
    ``holdout`` > 0 trains on the first ``train_images`` and validates and
    scores on the next ``holdout`` training images, never the test set.
    """
    model: str
    train_images: int
    seed: int
    epochs: Optional[int] = None
    lr_scale: float = 1.
    holdout: int = 0

    @property
    def name(self) -> str:
        tags = [f'n{self.train_images}']
        if self.epochs is not None:
            tags.append(f'e{self.epochs}')
        if self.lr_scale != 1:
            tags.append(f'lr{self.lr_scale:g}')
        if self.holdout:
            tags.append(f'holdout{self.holdout}')
        return f'{model_dir(self.model)}/{"_".join(tags)}_seed{self.seed}'

    @property
    def on_protocol(self) -> bool:
        """The protocol's own schedule, lr and test set."""
        return self.epochs is None and self.lr_scale == 1 and not self.holdout


def holdout_config(work_dir: str, config: str, first: int,
                   stop: int) -> str:
    """Write ``work_dir/config/holdout.py``: ``config`` validated and tested
    on the training images ``first`` to ``stop - 1``; return its path. (Not
    in ``work_dir`` itself, where the runner dumps the config it ran under
    the config's file name.)"""
    held = (f"dict(split='train', indices=list(range({first}, {stop})))")
    os.makedirs(osp.join(work_dir, 'config'), exist_ok=True)
    path = osp.join(work_dir, 'config', 'holdout.py')
    with open(path, 'w') as f:
        f.write(f'# {osp.basename(config)}, validated and scored on the '
                f'training images {first}-{stop - 1}\n'
                f'# (held out from training), never on the test set.\n'
                f'_base_ = [{config!r}]\n'
                f'val_dataloader = dict(dataset={held})\n'
                f'test_dataloader = dict(dataset={held})\n')
    return path


def describe(config: str, options: Optional[dict]) -> dict:
    """Params and FLOPs (one image) of a config's model, and its input
    size."""
    from lect_mm.analysis import build_model, count_flops, count_params
    cfg = load_config(config, options)
    size = input_size(cfg)
    model = build_model(config, options)
    return dict(params=count_params(model),
                flops=count_flops(model, (3, size, size)),
                resolution=size)


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


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process's finished children,
    their own children included (a training's loader workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def last_checkpoint(work_dir: str) -> str:
    """The checkpoint named in ``work_dir/last_checkpoint`` (a path outside
    ``work_dir`` is not followed: lect_mm's reader of that file)."""
    from lect_mm.engine import RunCheckpoints
    checkpoint = RunCheckpoints(work_dir).read_pointer()
    if checkpoint is None:
        raise FileNotFoundError(
            f'{osp.join(work_dir, "last_checkpoint")} is missing or names no '
            'checkpoint of this work dir: training wrote no checkpoint')
    return checkpoint


def run_one(protocol: str, run: Run, schedule: Schedule, work_root: str,
            cfg_options: Sequence[str]) -> dict:
    """Train and test one run unless its ``result.json`` exists."""
    work_dir = osp.join(work_root, run.name)
    result_path = osp.join(work_dir, 'result.json')
    if osp.isfile(result_path):
        with open(result_path) as f:
            result = json.load(f)
        print(f'[{run.name}] done earlier: top-1 {result["top1"]:.2f}')
        return result
    os.makedirs(work_dir, exist_ok=True)
    config = config_path(protocol, run.model)
    options = [*cfg_options, *model_options(protocol, run.model)]
    lr = float(load_config(config, parse_cfg_options(options))
               .optim_wrapper.optimizer.lr) * run.lr_scale
    if run.lr_scale != 1:
        options.append(f'optim_wrapper.optimizer.lr={lr:g}')
    if run.holdout:
        config = holdout_config(work_dir, config, run.train_images,
                                run.train_images + run.holdout)
    log_path = osp.join(work_dir, 'benchmark.log')
    options += [f'randomness.seed={run.seed}', *schedule_options(schedule)]

    # Wall and CPU seconds of training, summed over interrupted attempts.
    times_path = osp.join(work_dir, 'train_seconds.json')
    cpu_path = osp.join(work_dir, 'train_cpu_seconds.json')
    seconds, cpu_seconds = [], []
    for path, values in ((times_path, seconds), (cpu_path, cpu_seconds)):
        if osp.isfile(path):
            with open(path) as f:
                values.extend(json.load(f))
    train_cmd = [
        sys.executable, 'tools/train.py', config, '--work-dir', work_dir,
        '--resume', *PROTOCOLS[protocol]['train_args'],
        *_cfg_args(options)
    ]
    print(f'[{run.name}] training: {" ".join(train_cmd[1:])}')
    cpu_start = children_cpu_seconds()
    try:
        seconds.append(_run(train_cmd, log_path))
    except RunFailed as e:
        seconds.append(e.seconds)
        raise
    finally:
        cpu_seconds.append(children_cpu_seconds() - cpu_start)
        with open(times_path, 'w') as f:
            json.dump(seconds, f)
        with open(cpu_path, 'w') as f:
            json.dump(cpu_seconds, f)

    checkpoint = last_checkpoint(work_dir)
    metrics_path = osp.join(work_dir, 'test_metrics.json')
    test_cmd = [
        sys.executable, 'tools/test.py', config, checkpoint, '--work-dir',
        osp.join(work_dir, 'test'), '--out', metrics_path, '--out-item',
        'metrics', *_cfg_args(options)
    ]
    print(f'[{run.name}] testing: {" ".join(test_cmd[1:])}')
    _run(test_cmd, log_path)
    with open(metrics_path) as f:
        metrics = json.load(f)

    info = describe(config, parse_cfg_options(options))
    train_seconds = sum(seconds)
    result = dict(
        model=run.model,
        label=label(run.model),
        config=osp.relpath(config, REPO) if config.startswith(REPO) else
        osp.relpath(config, work_root),
        lr=lr,
        lr_scale=run.lr_scale,
        holdout=run.holdout,
        scored_on=(f'training images {run.train_images}-'
                   f'{run.train_images + run.holdout - 1}' if run.holdout
                   else 'test set'),
        on_protocol=run.on_protocol,
        checkpoint=osp.relpath(checkpoint, REPO)
        if checkpoint.startswith(REPO) else checkpoint,
        top1=float(metrics['accuracy/top1']),
        top5=float(metrics['accuracy/top5']),
        train_seconds=train_seconds,
        train_cpu_seconds=sum(cpu_seconds),
        train_attempts=len(seconds),
        images_per_s=schedule.epochs * schedule.train_images / train_seconds,
        steps_per_s=schedule.steps / train_seconds,
        commit=git_commit(),
        seed=run.seed,
        train_images=schedule.train_images,
        epochs=schedule.epochs,
        steps=schedule.steps,
        val_interval=schedule.val_interval,
        work_dir=osp.relpath(work_dir, work_root),
        **info)
    with open(result_path, 'w') as f:
        json.dump(result, f, indent=1)
    print(f'[{run.name}] top-1 {result["top1"]:.2f}, top-5 '
          f'{result["top5"]:.2f}, {train_seconds / 60:.1f} min')
    return result


#: ``--budget cpu-time`` calibration: two one-epoch runs of
#: ``tools/train.py`` of these many steps. The difference of their CPU
#: seconds over the difference of their steps is one step's cost, free of
#: what both runs share (start-up, loader workers' start, checkpoint,
#: validation).
CALIBRATION_STEPS = (5, 65)


def _write_json(path: str, obj) -> None:
    """Write ``obj`` to ``path`` whole or not at all."""
    tmp = f'{path}.tmp{os.getpid()}'
    with open(tmp, 'w') as f:
        json.dump(obj, f, indent=1)
        f.write('\n')
    os.replace(tmp, path)


def calibrate(protocol: str, model: str, work_root: str,
              cfg_options: Sequence[str],
              measure: bool = True) -> Optional[dict]:
    """Measured CPU seconds of one training step of ``model``, by two short
    runs (:data:`CALIBRATION_STEPS`); kept in ``work_root/calibration.json``
    and reused, so that a budget's epochs never change between sessions.
    None when it was never measured and ``measure`` is False."""
    path = osp.join(work_root, 'calibration.json')
    key = ' '.join([protocol, model, *cfg_options])
    cache = {}
    if osp.isfile(path):
        with open(path) as f:
            cache = json.load(f)
    if key in cache or not measure:
        return cache.get(key)
    config = config_path(protocol, model)
    options = [*cfg_options, *model_options(protocol, model)]
    batch = load_config(config, parse_cfg_options(options)
                        ).train_dataloader.batch_size
    cpu = []
    for steps in CALIBRATION_STEPS:
        work_dir = osp.join(work_root, 'calibration', model_dir(model),
                            f'steps{steps}')
        if osp.isdir(work_dir):  # an interrupted calibration's own folder
            shutil.rmtree(work_dir)
        os.makedirs(work_dir)
        cmd = [sys.executable, 'tools/train.py', config, '--work-dir',
               work_dir, *PROTOCOLS[protocol]['train_args'], *_cfg_args([
                   *options, 'train_cfg.max_epochs=1',
                   f'train_dataloader.dataset.indices={steps * batch}',
                   f'val_dataloader.dataset.indices={batch}'])]
        print(f'[calibration] {model}: {steps} steps')
        start = children_cpu_seconds()
        _run(cmd, osp.join(work_dir, 'benchmark.log'))
        cpu.append(children_cpu_seconds() - start)
    (short, long), (cpu_short, cpu_long) = CALIBRATION_STEPS, cpu
    entry = dict(cpu_seconds_per_step=(cpu_long - cpu_short) / (long - short),
                 cpu_seconds=dict(zip(map(str, CALIBRATION_STEPS), cpu)),
                 machine=machine(), commit=git_commit(),
                 date=datetime.date.today().isoformat())
    if entry['cpu_seconds_per_step'] <= 0:
        raise RuntimeError(f'calibration of {model}: {long} steps took no '
                           f'more CPU time than {short} ({cpu}); re-run it')
    if osp.isfile(path):  # another process may have added its models
        with open(path) as f:
            cache = json.load(f)
    cache[key] = entry
    _write_json(path, cache)
    print(f'[calibration] {model}: '
          f'{entry["cpu_seconds_per_step"]:.3f} CPU s per step')
    return entry


def step_cost(budget: str, protocol: str, model: str, work_root: str,
              cfg_options: Sequence[str],
              measure: bool = True) -> Optional[float]:
    """One training step of ``model`` in the budget's unit: CPU seconds
    (``cpu-time``; None if not calibrated and ``measure`` is False),
    training FLOPs (``flops``), or 1 (``epochs``)."""
    if budget == 'cpu-time':
        entry = calibrate(protocol, model, work_root, cfg_options, measure)
        return entry and entry['cpu_seconds_per_step']
    if budget == 'flops':
        config = config_path(protocol, model)
        options = [*cfg_options, *model_options(protocol, model)]
        parsed = parse_cfg_options(options)
        batch = load_config(config, parsed).train_dataloader.batch_size
        return (TRAIN_FLOPS_PER_FORWARD * batch *
                describe(config, parsed)['flops'])
    return 1.


def collect_results(work_root: str) -> List[dict]:
    """Every finished run under ``work_root`` (``*/*/result.json``)."""
    results = []
    for model in sorted(os.listdir(work_root)):
        model_dir = osp.join(work_root, model)
        if not osp.isdir(model_dir):
            continue
        for name in sorted(os.listdir(model_dir)):
            path = osp.join(model_dir, name, 'result.json')
            if osp.isfile(path):
                with open(path) as f:
                    results.append(json.load(f))
    return results


# ----------------------------------------------------------------- report
def mean_sd(values: Sequence[float]) -> Tuple[float, Optional[float]]:
    """Mean and sample standard deviation (None for one value)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def fmt_mean_sd(values: Sequence[float]) -> str:
    mean, sd = mean_sd(values)
    return f'{mean:.2f}' if sd is None else f'{mean:.2f} ± {sd:.2f}'


def report_ranked_pairs(models: Sequence[str]) -> List[Tuple[str, str]]:
    """Pairs ``(a, b)`` among ``models`` that the LeCT report ranks: ``a``
    above ``b`` on all three of its data sets (:data:`REPORT_TOP1`)."""
    known = [m for m in models if m in REPORT_TOP1]
    pairs = []
    for a in known:
        for b in known:
            if a != b and all(x > y for x, y in zip(REPORT_TOP1[a],
                                                    REPORT_TOP1[b])):
                pairs.append((a, b))
    return pairs


def compare_pairs(by_model: Dict[str, List[dict]]) -> List[dict]:
    """For each pair the report ranks, our mean difference and whether it
    exceeds the seeds' spread (the two standard deviations added: the
    mean ± SD intervals do not overlap)."""
    rows = []
    for a, b in report_ranked_pairs(list(by_model)):
        top_a = [r['top1'] for r in by_model[a]]
        top_b = [r['top1'] for r in by_model[b]]
        (mean_a, sd_a), (mean_b, sd_b) = mean_sd(top_a), mean_sd(top_b)
        report_diff = statistics.fmean(
            x - y for x, y in zip(REPORT_TOP1[a], REPORT_TOP1[b]))
        diff = mean_a - mean_b
        spread = None if sd_a is None or sd_b is None else sd_a + sd_b
        if spread is None:
            verdict = 'one seed: cannot tell'
        elif abs(diff) <= spread:
            verdict = 'no: within the spread'
        elif diff > 0:
            verdict = 'yes, as the report'
        else:
            verdict = 'yes, against the report'
        rows.append(dict(a=a, b=b, report_diff=report_diff, diff=diff,
                         spread=spread, verdict=verdict,
                         seeds=min(len(top_a), len(top_b))))
    return rows


def _axes():
    """A figure of the report's size and its axes."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6.4, 4.4), dpi=100)
    return fig, fig.subplots()


def _save(fig, ax, title: str, out_png: str) -> None:
    """Title, grid and legend as every plot of the report has them."""
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png)


def plot_data_efficiency(sizes_by_model: Dict[str, Dict[int, List[float]]],
                         out_png: str, title: str) -> None:
    """Top-1 (mean ± SD over seeds) against training-set size."""
    fig, ax = _axes()
    for i, (model, sizes) in enumerate(sizes_by_model.items()):
        xs = sorted(sizes)
        stats = [mean_sd(sizes[n]) for n in xs]
        ax.errorbar(xs, [m for m, _ in stats],
                    yerr=[sd or 0.0 for _, sd in stats], marker='o',
                    capsize=3, color=f'C{i % 10}', label=label(model))
    ax.set_xscale('log')
    ax.set_xlabel('training images (equal optimizer steps)')
    ax.set_ylabel('test top-1 (%)')
    _save(fig, ax, title, out_png)


def plot_cost(by_model: Dict[str, List[dict]], out_png: str,
              title: str) -> None:
    """Top-1 against training CPU time: one point per run, the mean
    marked."""
    fig, ax = _axes()
    for i, (model, runs) in enumerate(by_model.items()):
        color = f'C{i % 10}'
        minutes = [r.get('train_cpu_seconds', 0.) / 60 for r in runs]
        top1 = [r['top1'] for r in runs]
        ax.scatter(minutes, top1, color=color, alpha=0.45, s=18)
        ax.scatter([statistics.fmean(minutes)], [statistics.fmean(top1)],
                   color=color, marker='D', s=40, label=label(model))
    ax.set_xlabel('training CPU time (min, this machine)')
    ax.set_ylabel('test top-1 (%)')
    _save(fig, ax, title, out_png)


def plot(results: List[dict], work_root: str, out_png: str) -> str:
    """Convergence plot of the given runs; returns the per-run summary."""
    cmd = [
        sys.executable, 'tools/analysis_tools/plot_convergence.py',
        *[osp.join(work_root, r['work_dir']) for r in results], '--labels',
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
        device = (f'CPU ({name}, {os.cpu_count()} logical cores, '
                  f'{torch.get_num_threads()} intra-op thread'
                  f'{"s" if torch.get_num_threads() > 1 else ""} per run)')
    return (f'{device}; Python {platform.python_version()}, torch '
            f'{torch.__version__}')


def _group(results: List[dict], key) -> Dict:
    groups: Dict = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return groups


def _cpu_minutes(runs: List[dict]) -> float:
    return statistics.fmean(r.get('train_cpu_seconds', 0.) for r in runs) / 60


def seeds_table(by_model: Dict[str, List[dict]]) -> List[str]:
    seeds = sorted({r['seed'] for runs in by_model.values() for r in runs})
    rows = [
        '| model | top-1, mean ± SD | ' +
        ' | '.join(f'seed {s}' for s in seeds) +
        ' | top-5, mean | params (M) | FLOPs (G) | training time (min) | '
        'training CPU time (min) | images/s |',
        '|---|---:|' + '---:|' * len(seeds) + '---:|---:|---:|---:|---:|---:|',
    ]
    ranked = sorted(by_model.items(),
                    key=lambda kv: -mean_sd([r['top1'] for r in kv[1]])[0])
    for model, runs in ranked:
        per_seed = {r['seed']: r['top1'] for r in runs}
        rows.append(
            f'| {label(model)} | {fmt_mean_sd([r["top1"] for r in runs])} '
            '| ' + ' | '.join(
                f'{per_seed[s]:.2f}' if s in per_seed else '—'
                for s in seeds) +
            f' | {statistics.fmean(r["top5"] for r in runs):.2f} | '
            f'{runs[0]["params"] / 1e6:.4f} | '
            f'{runs[0]["flops"] / 1e9:.4f} | '
            f'{statistics.fmean(r["train_seconds"] for r in runs) / 60:.1f} '
            f'| {_cpu_minutes(runs):.1f} '
            f'| {statistics.fmean(r["images_per_s"] for r in runs):.0f} |')
    return rows


def pairs_table(pairs: List[dict]) -> List[str]:
    rows = [
        '| the report ranks | report: mean difference (3 data sets) | '
        'here: difference of means | seeds\' spread (SD + SD) | '
        'difference beyond the spread? |',
        '|---|---:|---:|---:|---|',
    ]
    for p in pairs:
        spread = '—' if p['spread'] is None else f'{p["spread"]:.2f}'
        rows.append(
            f'| {label(p["a"])} > {label(p["b"])} | '
            f'{p["report_diff"]:+.2f} | {p["diff"]:+.2f} | {spread} | '
            f'{p["verdict"]} |')
    return rows


def data_efficiency_table(sizes_by_model: Dict[str, Dict[int, List[float]]],
                          results: List[dict]) -> List[str]:
    sizes = sorted({n for s in sizes_by_model.values() for n in s})
    schedule = {r['train_images']: (r['epochs'], r['steps'])
                for r in results}
    rows = [
        '| model | ' + ' | '.join(
            f'{n:,} images ({schedule[n][0]} epochs, {schedule[n][1]:,} '
            'steps)' for n in sizes) + ' |',
        '|---|' + '---:|' * len(sizes),
    ]
    for model, by_size in sizes_by_model.items():
        rows.append(f'| {label(model)} | ' + ' | '.join(
            fmt_mean_sd(by_size[n]) + (f' ({len(by_size[n])})' if len(
                by_size[n]) > 1 else '') if n in by_size else '—'
            for n in sizes) + ' |')
    return rows


def write_report(protocol: str, results: List[dict], base_images: int,
                 convergence: Optional[str], out_dir: str,
                 commands: Sequence[str]) -> str:
    """Write ``fashion_mnist_<protocol>.md`` and its plots; returns the
    text."""
    os.makedirs(out_dir, exist_ok=True)
    stem = f'fashion_mnist_{protocol}'
    base = [r for r in results if r['train_images'] == base_images]
    by_model = {
        m: sorted(runs, key=lambda r: r['seed'])
        for m, runs in sorted(_group(base, lambda r: r['model']).items(),
                              key=lambda kv: model_order(kv[0]))
    }
    sizes_by_model: Dict[str, Dict[int, List[float]]] = {}
    for r in sorted(results, key=lambda r: model_order(r['model'])):
        sizes_by_model.setdefault(r['model'], {}).setdefault(
            r['train_images'], []).append(r['top1'])
    several_sizes = {
        m: s for m, s in sizes_by_model.items() if len(s) > 1
    }
    commits = sorted({r['commit'] for r in results})
    total = sum(r['train_seconds'] for r in results)
    one = base[0] if base else results[0]
    lines = [
        f'# Fashion-MNIST, `{protocol}` protocol',
        '',
        f'Protocol: {PROTOCOLS[protocol]["summary"]}',
        '',
        'Commands (each run is skipped once its result exists, so they can '
        'be re-run in any order and after any interruption):',
        '',
        '```bash',
        *commands,
        '```',
        '',
        f'Measured on: {machine()}; commit {", ".join(commits)}; '
        f'{datetime.date.today().isoformat()}. {len(results)} runs, '
        f'{total / 3600:.1f} h of training in all.',
        '',
        'Top-1/top-5: the last checkpoint on the 10,000 test images '
        '(`tools/test.py`). A seed sets initialisation, shuffling, '
        'augmentation and dropout (`randomness.seed`). Training time: wall '
        'time of `tools/train.py` (start-up and validation included); '
        'training CPU time: the CPU seconds of that process and its loader '
        'workers, which other work on the machine inflates much less than '
        'the wall time; images/s = epochs x training images / training '
        'time. FLOPs: one '
        f'image at {one["resolution"]}², one multiply-add = one FLOP, '
        'attention counted.',
        '',
        f'## Seeds: {base_images:,} training images',
        '',
        *seeds_table(by_model),
        '',
    ]
    pairs = compare_pairs(by_model)
    if pairs:
        lines += [
            '## The pairs the LeCT report ranks',
            '',
            'A pair is ranked when the report puts one model above the other '
            'on all three of its data sets (Table 2, Table 3 for the '
            'ablation). A difference here exceeds the spread when it is '
            'larger than the two models\' standard deviations over seeds '
            'added together (their mean ± SD intervals do not overlap).',
            '',
            *pairs_table(pairs),
            '',
        ]
    if several_sizes:
        eff_png = stem + '_data_efficiency.png'
        plot_data_efficiency(
            several_sizes, osp.join(out_dir, eff_png),
            f'Fashion-MNIST `{protocol}`: top-1 against training-set size')
        lines += [
            '## Data efficiency: the first N training images, equal steps',
            '',
            'Each size trains for the optimizer steps of the '
            f'{base_images:,}-image run (more epochs on fewer images; '
            'validation and checkpoints about as often); top-1 mean ± SD, '
            'the number of seeds in parentheses when more than one.',
            '',
            *data_efficiency_table(several_sizes, results),
            '',
            f'![data efficiency]({eff_png})',
            '',
        ]
    if by_model:
        cost_png = stem + '_cost.png'
        plot_cost(by_model, osp.join(out_dir, cost_png),
                  f'Fashion-MNIST `{protocol}`, {base_images:,} images: '
                  'top-1 against training time')
        lines += [
            '## Accuracy against training time',
            '',
            f'Each run at {base_images:,} training images is a point at its '
            'training CPU time, the diamond is the model\'s mean.',
            '',
            f'![cost]({cost_png})',
            '',
        ]
    if convergence:
        lines += [
            '## Convergence',
            '',
            f'![convergence]({stem}.png)',
            '',
            f'Validation top-1 per epoch of the first seed at '
            f'{base_images:,} images (2,000 test images in the `cpu` '
            'protocol):',
            '',
            convergence,
            '',
        ]
    text = '\n'.join(lines)
    with open(osp.join(out_dir, stem + '.md'), 'w') as f:
        f.write(text)
    write_runs(results, osp.join(out_dir, stem + '_runs.json'))
    return text


#: What ``<stem>_runs.json`` keeps of each run: enough to compare protocols
#: (``--resolution-report``) without the work dirs.
RUN_FIELDS = ('model', 'seed', 'train_images', 'top1', 'top5', 'resolution',
              'params', 'flops', 'train_seconds', 'train_cpu_seconds',
              'commit')


def write_runs(results: List[dict], path: str) -> None:
    """The finished runs' figures, one object per run, sorted."""
    runs = sorted(({k: r[k] for k in RUN_FIELDS if k in r} for r in results),
                  key=lambda r: (r['model'], r['train_images'], r['seed']))
    with open(path, 'w') as f:
        json.dump(runs, f, indent=1)
        f.write('\n')


# ------------------------------------------------------------ cost report
#: The budgets of ``--cost-report``: (budget, scale) of the reference run.
COST_BUDGETS = (('cpu-time', 1.), ('flops', 1.), ('epochs', 1.))
#: The budget factors (``--budget-scale``) the cost page recognises a run
#: by, beside x1 (listed first); a run of no budget is listed without one.
COST_SCALES = (0.25, 0.5, 2., 4.)


def budget_tag(budget: str, scale: float) -> str:
    return f'{budget} x{scale:g}'


def run_budgets(result: dict, epochs_at: Dict[Tuple[str, str, float], int]
                ) -> List[str]:
    """The budgets (``'cpu-time x1'`` ...) whose schedule ``result`` ran."""
    if result['holdout'] or result['lr_scale'] != 1:
        return []
    return [budget_tag(b, x) for (m, b, x), e in epochs_at.items()
            if m == result['model'] and e == result['epochs']]


def budget_schedules(args, models: Sequence[str], cfg, base_images: int,
                     work_root: str, options: Sequence[str],
                     budgets) -> Dict[Tuple[str, str, float], int]:
    """``(model, budget, scale) -> epochs`` for the budgets that can be
    computed without running anything (cpu-time: calibrated models)."""
    ref_steps = schedule_for(cfg, base_images, base_images).steps
    epochs_at = {}
    for budget, scale in budgets:
        ref = step_cost(budget, args.protocol, args.budget_ref, work_root,
                        options, measure=False)
        for model in models:
            cost = step_cost(budget, args.protocol, model, work_root, options,
                             measure=False)
            if ref is None or cost is None:
                continue
            steps = budget_steps(budget, scale, ref_steps, ref, cost)
            epochs_at[model, budget, scale] = schedule_for(
                cfg, base_images, base_images, steps).epochs
    return epochs_at


def spread_verdict(a: Sequence[float], b: Sequence[float]) -> str:
    """Whether mean(a) - mean(b) exceeds the two SDs added (the report's
    rule for the seeds' spread)."""
    (mean_a, sd_a), (mean_b, sd_b) = mean_sd(a), mean_sd(b)
    if sd_a is None or sd_b is None:
        return 'one seed: cannot tell'
    diff = mean_a - mean_b
    if abs(diff) <= sd_a + sd_b:
        return 'no: within the spread'
    return 'yes, ahead' if diff > 0 else 'yes, behind'


def pareto_front(points: Sequence[Tuple[float, float]]
                 ) -> List[Tuple[float, float]]:
    """The points no other point beats in both cost (lower) and top-1
    (higher), by cost."""
    front = []
    for cost, top1 in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or top1 > front[-1][1]:
            front.append((cost, top1))
    return front


def plot_pareto(curves: Dict[str, List[dict]], rows: List[dict],
                out_png: str, title: str) -> None:
    """Left: top-1 (mean ± SD) against training CPU minutes, every budget a
    model ran (its budgets joined by a line); right: top-1 at the CPU-time
    budget against inference latency. Marker area proportional to the
    parameters; the dashed line joins the points no other beats in both."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 4.8), dpi=100)
    axes = fig.subplots(1, 2, sharey=True)
    colors = {model: f'C{i % 10}' for i, model in enumerate(curves)}

    def marker(ax, x, row, model, **kwargs):
        ax.errorbar([x], [row['top1']], yerr=[row['sd'] or 0.], fmt='none',
                    ecolor=colors[model], capsize=3)
        ax.scatter([x], [row['top1']], s=row['params'] / 2e4,
                   color=colors[model], alpha=0.7, edgecolors='black',
                   linewidths=0.5, **kwargs)

    left, right = axes
    everything = []
    for model, points in curves.items():
        points = sorted(points, key=lambda p: p['cpu_minutes'])
        left.plot([p['cpu_minutes'] for p in points],
                  [p['top1'] for p in points], color=colors[model],
                  linewidth=1, alpha=0.6)
        for p in points:
            marker(left, p['cpu_minutes'], p, model)
            if len(points) > 1:
                left.annotate(f'{p["epochs"]} ep', (p['cpu_minutes'],
                                                    p['top1']), fontsize=7,
                              textcoords='offset points', xytext=(4, -10))
            everything.append((p['cpu_minutes'], p['top1']))
    with_latency = [r for r in rows if r.get('latency_ms') is not None]
    for row in with_latency:
        marker(right, row['latency_ms'], row, row['model'],
               label=f'{label(row["model"])} ({row["params"] / 1e6:.1f} M)')
    for ax, points in ((left, everything),
                       (right, [(r['latency_ms'], r['top1'])
                                for r in with_latency])):
        front = pareto_front(points)
        if len(front) > 1:
            ax.plot(*zip(*front), linestyle='--', color='gray', linewidth=1)
        ax.grid(True, alpha=0.3)
    left.set_xlabel('training CPU time (min, mean over seeds)')
    right.set_xscale('log')
    right.set_xlabel('inference latency, batch 1 (ms)')
    left.set_ylabel('test top-1 (%), mean ± SD over seeds')
    if with_latency:
        right.legend(fontsize=7, loc='lower right', markerscale=0.4)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_png)


def lr_check(holdout_runs: List[dict]) -> Tuple[List[str], List[str]]:
    """The table of held-out top-1 per model and lr factor, and the
    rankings with every model at x1 and at its best factor."""
    by_model = _group(holdout_runs, lambda r: r['model'])
    scales = sorted({r['lr_scale'] for r in holdout_runs})
    rows = [
        '| model | ' + ' | '.join(f'lr x{x:g}' for x in scales) +
        ' | best |', '|---|' + '---:|' * (len(scales) + 1)
    ]
    at_one, best = {}, {}
    for model in sorted(by_model, key=model_order):
        runs = {r['lr_scale']: r for r in by_model[model]}
        cells = [f'{runs[x]["top1"]:.2f} ({runs[x]["lr"]:g})' if x in runs
                 else '—' for x in scales]
        top = max(runs.values(), key=lambda r: r['top1'])
        best[model] = top['top1']
        if 1. in runs:
            at_one[model] = runs[1.]['top1']
        rows.append(f'| {label(model)} | ' + ' | '.join(cells) +
                    f' | x{top["lr_scale"]:g} |')

    def ranking(scores):
        return ' > '.join(label(m) for m in sorted(scores,
                                                   key=lambda m: -scores[m]))
    return rows, [ranking(at_one), ranking(best)]


def cost_commands(protocol: str, results: List[dict]) -> List[str]:
    """The commands of this tool that run the cost page's runs: one per
    budget, held-out split and set of models and seeds, factors of the
    budget or of the lr merged where they ran the same models and seeds.
    Runs on held-out images ran at the CPU-time budget's steps."""
    by_key: Dict = {}
    for r in results:
        if r['holdout']:
            tag = budget_tag('cpu-time', 1.)
        elif r['budgets']:
            tag = r['budgets'][0]
        else:  # not a run of any budget: no command of the page made it
            continue
        kind, scale = tag.rsplit(' x', 1)
        key = (kind, r['holdout'], float(scale), r['lr_scale'])
        by_key.setdefault(key, {}).setdefault(r['model'], set()).add(
            r['seed'])

    def frozen(seeds_by_model):
        return tuple(sorted(((m, tuple(sorted(s)))
                             for m, s in seeds_by_model.items()),
                            key=lambda ms: model_order(ms[0])))

    lrs: Dict = {}  # merge lr factors, then budget factors
    for (kind, holdout, scale, lr), seeds in by_key.items():
        lrs.setdefault((kind, holdout, scale, frozen(seeds)), []).append(lr)
    scales: Dict = {}
    for (kind, holdout, scale, runs), factors in lrs.items():
        scales.setdefault((kind, holdout, tuple(sorted(factors)), runs),
                          []).append(scale)
    lines = []
    for (kind, holdout, factors, runs), budget_scales in sorted(
            scales.items(), key=lambda kv: (kv[0][1], kv[0][0] != 'cpu-time',
                                            kv[0][0], sorted(kv[1]))):
        by_seeds: Dict = {}
        for model, seeds in runs:
            by_seeds.setdefault(seeds, []).append(model)
        for seeds, models in by_seeds.items():
            line = (f'python tools/benchmark_accuracy.py --protocol '
                    f'{protocol} --budget {kind}')
            if sorted(budget_scales) != [1.]:
                line += ' --budget-scale ' + ' '.join(
                    f'{x:g}' for x in sorted(budget_scales))
            if holdout:
                line += f' --holdout {holdout}'
            if list(factors) != [1.]:
                line += ' --lr-scale ' + ' '.join(f'{x:g}' for x in factors)
            lines.append(line + ' --models ' + ' '.join(models) +
                         ' --seeds ' + ' '.join(map(str, seeds)))
    return lines


def write_cost_report(args, work_root: str, options: Sequence[str], cfg,
                      base_images: int) -> str:
    """``fashion_mnist_cost.md``: accuracy at equal training cost (the
    budgets of :data:`COST_BUDGETS`), the lr check on held-out images, the
    budget curve and the Pareto plots; ``_runs.json`` and
    ``_calibration.json`` beside it."""
    os.makedirs(args.out_dir, exist_ok=True)
    results = [r for r in collect_results(work_root)
               if r['train_images'] + r.get('holdout', 0) == base_images]
    if not results:
        raise SystemExit(f'--cost-report: no finished run under {work_root}')
    for r in results:  # runs of the protocol's own schedule, before budgets
        r.setdefault('holdout', 0)
        r.setdefault('lr_scale', 1.)
    models = sorted({r['model'] for r in results}, key=model_order)
    epochs_at = budget_schedules(args, models, cfg, base_images, work_root,
                                 options, COST_BUDGETS + tuple(
                                     (budget, x) for x in COST_SCALES
                                     for budget, _ in COST_BUDGETS))
    for r in results:
        r['budgets'] = run_budgets(r, epochs_at)
    latency = {}
    if args.latency:
        with open(args.latency) as f:
            latency = json.load(f)
    main = [r for r in results if not r['holdout'] and r['lr_scale'] == 1]

    def at(budget, scale=1.):
        tag = budget_tag(budget, scale)
        groups = _group([r for r in main if tag in r['budgets']],
                        lambda r: r['model'])
        return {m: sorted(groups[m], key=lambda r: r['seed'])
                for m in sorted(groups, key=model_order)}

    cpu = at('cpu-time')
    ref = cpu.get(args.budget_ref, [])
    rows = []
    for model, runs in cpu.items():
        top1 = [r['top1'] for r in runs]
        mean, sd = mean_sd(top1)
        rows.append(dict(
            model=model, top1=mean, sd=sd, runs=runs,
            params=runs[0]['params'], flops=runs[0]['flops'],
            epochs=runs[0]['epochs'], lr=runs[0]['lr'],
            cpu_minutes=_cpu_minutes(runs),
            latency_ms=latency.get('models', {}).get(model, {}).get('ms'),
            verdict='—' if model == args.budget_ref or not ref else
            spread_verdict(top1, [r['top1'] for r in ref])))
    rows.sort(key=lambda row: -row['top1'])
    ref_label = label(args.budget_ref)
    calibration = {}
    path = osp.join(work_root, 'calibration.json')
    if osp.isfile(path):
        with open(path) as f:
            calibration = json.load(f)
    commits = sorted({r['commit'] for r in results})
    # The machine the runs were measured on, as their calibration recorded
    # it (threads per run included), not the process writing the page.
    machines = sorted({e['machine'] for e in calibration.values()
                       if 'machine' in e}) or [machine()]
    lines = [
        '# Fashion-MNIST: accuracy at equal training cost',
        '',
        f'Protocol: {PROTOCOLS[args.protocol]["summary"]} Every model at '
        f'the training cost of {ref_label}\'s protocol run, the '
        'schedule\'s cosine spanning its own epochs; validation about as '
        'often as the protocol\'s (every round(epochs / 8) epochs). timm '
        'models: `timm.create_model(NAME, pretrained=False, '
        'num_classes=10)` through mmpretrain\'s `TimmClassifier` '
        '(configs/fashion_mnist/timm_fashion_mnist_cpu.py), with their own '
        'defaults otherwise (no drop path; the zoo\'s models keep the '
        'report\'s 0.1). `TimmClassifier` rather than lect_mm\'s timm '
        'door, which goes the other way (the zoo as timm models): it takes '
        'any timm model by name into mmpretrain\'s classifier, data '
        'preprocessor, loss and runner, the route an mmpretrain user takes, '
        'so that every model runs through the same `tools/train.py` and '
        '`tools/test.py`.',
        '',
        f'Measured on: {"; ".join(machines)}; commit '
        f'{", ".join(commits)}; '
        f'{datetime.date.today().isoformat()}. {len(results)} runs, '
        f'{sum(r["train_cpu_seconds"] for r in results) / 3600:.1f} '
        'CPU-hours of training in all.',
        '',
        '## At the CPU time of ' + ref_label + '\'s 8 epochs',
        '',
        'Budget: the CPU seconds of one training step, measured by two '
        f'calibration runs of {CALIBRATION_STEPS[0]} and '
        f'{CALIBRATION_STEPS[1]} steps (`tools/train.py`, one epoch each; '
        'the difference of their CPU seconds, the training process and its '
        'loader workers, over the difference of their steps), times '
        f'{ref_label}\'s steps, gives each model its steps and so its '
        'epochs. Training CPU time: what each run measured (start-up and '
        'validation included). lr: the report\'s, 6e-3 for pure convnets '
        'and 1e-3 for models with attention (a softmax in the forward). '
        f'Beyond the spread: the difference to {ref_label} exceeds the two '
        'models\' standard deviations over seeds added.',
        '',
        '| model | top-1, mean ± SD | seeds | epochs | lr | params (M) | '
        'FLOPs (G) | CPU s / step | training CPU time (min) | latency (ms) '
        f'| against {ref_label}, beyond the spread? |',
        '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|',
    ]
    for row in rows:
        entry = calibration.get(
            ' '.join([args.protocol, row['model'], *options]), {})
        step = entry.get('cpu_seconds_per_step')
        top1 = [r['top1'] for r in row['runs']]
        step = '—' if step is None else f'{step:.3f}'
        ms = row['latency_ms']
        ms = '—' if ms is None else f'{ms:.2f}'
        lines.append(
            f'| {label(row["model"])} | {fmt_mean_sd(top1)} | '
            + ', '.join(f'{t:.2f}' for t in top1) +
            f' | {row["epochs"]} | {row["lr"]:g} | '
            f'{row["params"] / 1e6:.2f} | {row["flops"] / 1e9:.4f} | '
            f'{step} | {row["cpu_minutes"]:.1f} | {ms} | {row["verdict"]} |')
    if latency:
        lines += ['', f'Latency: {latency["setup"]}']
    curves = {}
    for model in models:
        by_epochs = _group([r for r in main if r['model'] == model],
                           lambda r: r['epochs'])
        curves[model] = []
        for epochs, runs in sorted(by_epochs.items()):
            top1, sd = mean_sd([r['top1'] for r in runs])
            curves[model].append(dict(
                epochs=epochs, runs=runs, top1=top1, sd=sd,
                params=runs[0]['params'], cpu_minutes=_cpu_minutes(runs)))
    if rows:
        pareto = 'fashion_mnist_cost_pareto.png'
        plot_pareto(curves, rows, osp.join(args.out_dir, pareto),
                    'Fashion-MNIST 64×64, 10,000 images: every budget run '
                    '(left), at the CPU time of '
                    f'{ref_label}\'s 8 epochs (right); marker area: '
                    'parameters')
        lines += ['', f'![Pareto]({pareto})']
    lines.append('')

    flops = {m: runs for m, runs in at('flops').items()
             if m != args.budget_ref}
    if flops:
        lines += [
            f'## At the training FLOPs of {ref_label}\'s 8 epochs',
            '',
            'Budget: forward FLOPs of one image × '
            f'{TRAIN_FLOPS_PER_FORWARD} (forward and backward) × batch × '
            'steps, the same for every model; the models with runs at that '
            'budget (a run whose epochs both budgets give counts for both).',
            '',
            '| model | top-1, mean ± SD | seeds | epochs | training CPU '
            f'time (min) | against {ref_label}, beyond the spread? |',
            '|---|---:|---|---:|---:|---|',
        ]
        for model, runs in flops.items():
            top1 = [r['top1'] for r in runs]
            lines.append(
                f'| {label(model)} | {fmt_mean_sd(top1)} | '
                + ', '.join(f'{t:.2f}' for t in top1) +
                f' | {runs[0]["epochs"]} | {_cpu_minutes(runs):.1f} | '
                + (spread_verdict(top1, [r['top1'] for r in ref])
                   if ref else '—') + ' |')
        lines.append('')

    several = {m: points for m, points in curves.items() if len(points) > 1}
    if several:
        lines += [
            '## Accuracy against budget',
            '',
            'Every budget each model ran more than one of (the left panel of '
            'the plot above); top-1: the mean ± SD over the seeds run at that '
            'budget.',
            '',
            '| model | epochs | budgets | seeds | training CPU time (min) | '
            'top-1 |',
            '|---|---:|---|---:|---:|---:|',
        ]
        for model, points in several.items():
            for p in points:
                lines.append(
                    f'| {label(model)} | {p["epochs"]} | '
                    f'{", ".join(p["runs"][0]["budgets"]) or "—"} | '
                    f'{len(p["runs"])} | {p["cpu_minutes"]:.1f} | '
                    f'{fmt_mean_sd([r["top1"] for r in p["runs"]])} |')
        lines.append('')

    held = [r for r in results if r['holdout']]
    if held:
        table, (plain, tuned) = lr_check(held)
        first = min(r['train_images'] for r in held)
        lines += [
            '## Learning rate check on held-out training images',
            '',
            f'Trained on the first {first:,} training images and scored on '
            f'the next {base_images - first:,} (never the test set), seed '
            f'0, at each model\'s CPU-time budget in steps; top-1 (lr).',
            '',
            *table,
            '',
            f'- Ranking at the report\'s lr: {plain}.',
            f'- Ranking at each model\'s best lr: {tuned}.',
            '',
        ]
    page = f'python tools/benchmark_accuracy.py --protocol {args.protocol} ' \
        '--cost-report' + (f' --latency {args.latency}' if args.latency
                           else '')
    lines += [
        '## Commands',
        '',
        'Each run is skipped once its result exists, so the runs can be '
        'made in any order and after any interruption; the latency and '
        'this page last, on an otherwise idle machine:',
        '',
        '```bash',
        'apt-get install -y dataset-fashion-mnist',
        *cost_commands(args.protocol, results),
        *([latency['command']] if 'command' in latency else []),
        page,
        '```',
        '',
    ]
    text = '\n'.join(lines)
    with open(osp.join(args.out_dir, 'fashion_mnist_cost.md'), 'w') as f:
        f.write(text)
    runs = sorted(({k: r[k] for k in (*RUN_FIELDS, *COST_FIELDS) if k in r}
                   for r in results),
                  key=lambda r: (model_order(r['model']), r['epochs'],
                                 r['holdout'], r['lr_scale'], r['seed']))
    _write_json(osp.join(args.out_dir, 'fashion_mnist_cost_runs.json'), runs)
    _write_json(osp.join(args.out_dir, 'fashion_mnist_cost_calibration.json'),
                calibration)
    return text


#: What the cost page's ``_runs.json`` keeps beyond :data:`RUN_FIELDS`.
COST_FIELDS = ('epochs', 'steps', 'val_interval', 'lr', 'lr_scale',
               'holdout', 'on_protocol', 'budgets', 'work_dir')


def import_runs(work_root: str, paths: Sequence[str]) -> int:
    """Copy finished runs of another session or machine into ``work_root``
    where it lacks them, so that they are not run again: a page's
    ``*_runs.json`` (each run with its ``work_dir``) becomes their
    ``result.json``, a ``*_calibration.json`` joins ``calibration.json``.
    Returns the runs imported."""
    imported = 0
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, dict):  # a calibration file
            target = osp.join(work_root, 'calibration.json')
            cache = {}
            if osp.isfile(target):
                with open(target) as f:
                    cache = json.load(f)
            _write_json(target, {**data, **cache})
            continue
        for run in data:
            if 'work_dir' not in run:
                raise SystemExit(f'--import-runs: {path} has a run without '
                                 f'its work_dir: {run}')
            result = osp.join(work_root, run['work_dir'], 'result.json')
            if not osp.isfile(result):
                os.makedirs(osp.dirname(result), exist_ok=True)
                _write_json(result, dict(run, imported_from=path))
                imported += 1
    return imported


# ------------------------------------------------------ input size report
def resolution_rows(runs_by_size: Dict[int, List[dict]]) -> List[dict]:
    """For each pair the report ranks, among the models run at every size:
    the margin (difference of means) at each size and whether the margin
    changes beyond the seeds' spread between the smallest and the largest
    size: ``|margin_large - margin_small|`` exceeds the four standard
    deviations added (the two margins' mean ± (SD + SD) intervals do not
    overlap)."""
    sizes = sorted(runs_by_size)
    pairs_at = {}
    for size in sizes:
        base = max(r['train_images'] for r in runs_by_size[size])
        by_model = _group([r for r in runs_by_size[size]
                           if r['train_images'] == base], lambda r: r['model'])
        pairs_at[size] = {(p['a'], p['b']): p for p in compare_pairs(
            {m: by_model[m] for m in MODELS if m in by_model})}
    common = [k for k in pairs_at[sizes[0]]
              if all(k in pairs_at[s] for s in sizes)]
    rows = []
    for key in common:
        small, large = pairs_at[sizes[0]][key], pairs_at[sizes[-1]][key]
        change = large['diff'] - small['diff']
        if small['spread'] is None or large['spread'] is None:
            spread, verdict = None, 'one seed: cannot tell'
        else:
            spread = small['spread'] + large['spread']
            verdict = ('no: within the spread' if abs(change) <= spread else
                       'yes, it grows' if change > 0 else 'yes, it shrinks')
        rows.append(dict(a=key[0], b=key[1],
                         margins={s: pairs_at[s][key]['diff'] for s in sizes},
                         change=change, spread=spread, verdict=verdict))
    return rows


def plot_resolution(runs_by_size: Dict[int, List[dict]], out_png: str,
                    title: str) -> None:
    """Top-1 (mean ± SD over seeds) of each model against input size."""
    fig, ax = _axes()
    sizes = sorted(runs_by_size)
    for i, model in enumerate(MODELS):
        points = []
        for size in sizes:
            top1 = [r['top1'] for r in runs_by_size[size]
                    if r['model'] == model]
            if top1:
                points.append((size, *mean_sd(top1)))
        if len(points) < 2:
            continue
        ax.errorbar([p[0] for p in points], [p[1] for p in points],
                    yerr=[p[2] or 0.0 for p in points], marker='o',
                    capsize=3, color=f'C{i % 10}', label=label(model))
    ax.set_xticks(sizes)
    ax.set_xlabel('input size (pixels per side)')
    ax.set_ylabel('test top-1 (%), mean ± SD over seeds')
    _save(fig, ax, title, out_png)


def write_resolution_report(out_dir: str,
                            protocols: Sequence[str] = ('cpu', 'cpu112')
                            ) -> str:
    """``fashion_mnist_resolution.md`` and ``.png`` from the protocols'
    ``fashion_mnist_<protocol>_runs.json`` in ``out_dir``: top-1 per input
    size, the plot, and the report's ranked pairs at each size."""
    runs_by_size: Dict[int, List[dict]] = {}
    pages = {}
    for protocol in protocols:
        path = osp.join(out_dir, f'fashion_mnist_{protocol}_runs.json')
        if not osp.isfile(path):
            raise SystemExit(f'--resolution-report: {path} is missing; '
                             f'write it with --protocol {protocol} '
                             '--report-only')
        with open(path) as f:
            runs = json.load(f)
        base = max(r['train_images'] for r in runs)
        runs = [r for r in runs if r['train_images'] == base]
        size = {r['resolution'] for r in runs}
        if len(size) != 1:
            raise SystemExit(f'{path}: runs at several input sizes {size}')
        runs_by_size[size.pop()] = runs
        pages[protocol] = f'fashion_mnist_{protocol}.md'
    sizes = sorted(runs_by_size)
    models = [m for m in MODELS
              if all(any(r['model'] == m for r in runs_by_size[s])
                     for s in sizes)]
    png = 'fashion_mnist_resolution.png'
    plot_resolution({s: [r for r in runs_by_size[s] if r['model'] in models]
                     for s in sizes}, osp.join(out_dir, png),
                    'Fashion-MNIST: top-1 against input size')
    head = ' | '.join(f'{s}×{s}: top-1, mean ± SD (seeds)' for s in sizes)
    lines = [
        '# Fashion-MNIST: accuracy against input size',
        '',
        'Each protocol\'s runs on its full training set, the same apart '
        'from the input size; the number of seeds in parentheses. One '
        'protocol page per size: ' + ', '.join(
            f'[{p}]({page})' for p, page in pages.items()) + '. Written by '
        '`python tools/benchmark_accuracy.py --resolution-report` from '
        'the pages\' `*_runs.json`.',
        '',
        f'| model | {head} | change |',
        '|---|' + '---:|' * (len(sizes) + 1),
    ]
    for model in models:
        stats = [[r['top1'] for r in runs_by_size[s] if r['model'] == model]
                 for s in sizes]
        change = statistics.fmean(stats[-1]) - statistics.fmean(stats[0])
        lines.append(f'| {label(model)} | ' + ' | '.join(
            f'{fmt_mean_sd(t)} ({len(t)})' for t in stats) +
            f' | {change:+.2f} |')
    rows = resolution_rows({s: [r for r in runs_by_size[s]
                                if r['model'] in models] for s in sizes})
    lines += [
        '',
        f'![top-1 against input size]({png})',
        '',
        '## The pairs the LeCT report ranks, at each size',
        '',
        'Margin: the difference of the two models\' mean top-1. The margin '
        f'changes beyond the spread from {sizes[0]} to {sizes[-1]} when the '
        'change is larger than the four standard deviations added (the two '
        'margins\' mean ± (SD + SD) intervals do not overlap).',
        '',
        '| the report ranks | ' + ' | '.join(
            f'margin at {s}' for s in sizes) +
        ' | change | spread (4 SDs) | change beyond the spread? |',
        '|---|' + '---:|' * (len(sizes) + 2) + '---|',
    ]
    for r in rows:
        spread = '—' if r['spread'] is None else f'{r["spread"]:.2f}'
        lines.append(
            f'| {label(r["a"])} > {label(r["b"])} | ' + ' | '.join(
                f'{r["margins"][s]:+.2f}' for s in sizes) +
            f' | {r["change"]:+.2f} | {spread} | {r["verdict"]} |')
    text = '\n'.join(lines) + '\n'
    with open(osp.join(out_dir, 'fashion_mnist_resolution.md'), 'w') as f:
        f.write(text)
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Train and test the report\'s model set on '
        'Fashion-MNIST and write the results report')
    parser.add_argument(
        '--protocol', choices=sorted(PROTOCOLS),
        help='cpu: 64x64, 10k images, 8 epochs; cpu112: the same at '
        '112x112; gpu: the report\'s 224x224 and augmentation, 60k images, '
        '5 epochs')
    parser.add_argument(
        '--models', nargs='+',
        help='models to run, in this order: the zoo\'s names '
        f'({", ".join(MODELS)}) or {TIMM_PREFIX}NAME for any timm model '
        '(default: the protocol\'s set)')
    parser.add_argument(
        '--seeds', nargs='+', type=int,
        help='run every model with each of these seeds (default: the '
        'config\'s randomness.seed)')
    parser.add_argument(
        '--train-images', nargs='+', type=int,
        help='run every model on the first N training images for each N, '
        'with the optimizer steps of the protocol\'s own size (default: '
        'the protocol\'s size only)')
    parser.add_argument(
        '--budget', choices=BUDGETS, default='epochs',
        help='what each model gets as much of as the --budget-ref model on '
        'the protocol\'s schedule: epochs (the protocol\'s, the default), '
        'cpu-time (measured CPU seconds per step, calibration.json) or '
        'flops (training FLOPs per step); sets each model\'s epochs')
    parser.add_argument(
        '--budget-ref', default='lect_v1',
        help='the model whose protocol run sets the budget (default '
        'lect_v1)')
    parser.add_argument(
        '--budget-scale', nargs='+', type=float, default=[1.],
        help='budgets in units of the reference run\'s cost, one run per '
        'value (default 1)')
    parser.add_argument(
        '--lr-scale', nargs='+', type=float, default=[1.],
        help='multiply each config\'s lr by these, one run per value '
        '(default 1)')
    parser.add_argument(
        '--holdout', type=int, default=0, metavar='N',
        help='train on all but the last N of the protocol\'s training '
        'images; validate and score on those N, never on the test set')
    parser.add_argument(
        '--work-dir',
        help='root of the runs\' work dirs; default '
        'work_dirs/fashion_mnist_<protocol>')
    parser.add_argument(
        '--out-dir', default=osp.join(REPO, 'docs', 'results'),
        help='where the markdown report and the plots go')
    parser.add_argument(
        '--cfg-options', nargs='+', metavar='KEY=VALUE',
        help='passed to tools/train.py and tools/test.py of every run')
    parser.add_argument(
        '--report-only', action='store_true',
        help='run nothing; write the report of the finished runs')
    parser.add_argument(
        '--cost-report', action='store_true',
        help='run nothing; write fashion_mnist_cost.md (accuracy at equal '
        'CPU time and FLOPs to --budget-ref\'s protocol run, the budget '
        'curve, the --holdout lr check, the Pareto plots) from the '
        'finished runs and calibration.json under --work-dir')
    parser.add_argument(
        '--latency', metavar='JSON',
        help='with --cost-report: inference latency per model, as written '
        'by benchmarks/inference.py --json')
    parser.add_argument(
        '--import-runs', nargs='+', metavar='JSON',
        help='finished runs of another session (a page\'s *_runs.json, '
        'e.g. docs/results/fashion_mnist_cost_runs.json) and their '
        '*_calibration.json, copied into --work-dir where it lacks them: '
        'those runs are not run again')
    parser.add_argument(
        '--resolution-report', action='store_true',
        help='run nothing; write fashion_mnist_resolution.md (top-1 against '
        'input size) from the cpu and cpu112 pages\' *_runs.json in '
        '--out-dir')
    args = parser.parse_args(argv)
    if args.protocol is None and not args.resolution_report:
        parser.error('--protocol is required (or --resolution-report)')
    for model in [*(args.models or ()), args.budget_ref
                  ] if args.protocol else ():
        try:
            check_model(args.protocol, model)
        except ValueError as e:
            parser.error(str(e).replace('--models', '--budget-ref')
                         if model is args.budget_ref else str(e))
    for flag in ('budget_scale', 'lr_scale'):
        for x in getattr(args, flag):
            if not x > 0:
                parser.error(f'--{flag.replace("_", "-")}: {x} is not a '
                             'positive factor')
    if args.holdout < 0:
        parser.error(f'--holdout: {args.holdout} is not a count of images')
    if args.holdout and args.train_images:
        parser.error('--holdout carves its images from the protocol\'s '
                     'training set; it does not combine with --train-images')
    for n in args.train_images or ():
        if n < 1:
            parser.error(f'--train-images: {n} is not a positive count')
    return args


def record_command(work_root: str, command: str) -> List[str]:
    """Append ``command`` to the work dir's list of commands (once)."""
    path = osp.join(work_root, 'commands.json')
    commands = []
    if osp.isfile(path):
        with open(path) as f:
            commands = json.load(f)
    if command not in commands:
        commands.append(command)
        with open(path, 'w') as f:
            json.dump(commands, f, indent=1)
    return commands


def plan_runs(args, models: Sequence[str], cfg, base_images: int,
              sizes: Sequence[int], seeds: Sequence[int], work_root: str,
              options: Sequence[str]) -> List[Tuple[Run, Schedule]]:
    """The runs of a command, in order, each with its schedule; prints each
    model's budget (calibrating first what ``--budget cpu-time`` needs)."""
    ref_steps = schedule_for(cfg, base_images, base_images).steps
    ref_cost = step_cost(args.budget, args.protocol, args.budget_ref,
                         work_root, options)
    costs = {m: step_cost(args.budget, args.protocol, m, work_root, options)
             for m in models}
    if args.budget != 'epochs':
        print(f'--budget {args.budget}: {args.budget_ref} costs '
              f'{ref_cost:.4g} per step, {ref_steps} steps')
    plan = []
    for n in sizes:
        for scale in args.budget_scale:
            steps = {m: budget_steps(args.budget, scale, ref_steps, ref_cost,
                                     costs[m]) for m in models}
            for lr_scale in args.lr_scale:
                for seed in seeds:
                    for model in models:
                        schedule = schedule_for(cfg, base_images, n,
                                                steps[model])
                        own = schedule_for(cfg, base_images, n)
                        epochs = (None if schedule.epochs == own.epochs
                                  else schedule.epochs)
                        plan.append((Run(model, n, seed, epochs, lr_scale,
                                         args.holdout), schedule))
            if args.budget != 'epochs':
                for model in models:
                    print(f'  x{scale:g}: {label(model)}: {costs[model]:.4g} '
                          f'per step -> {steps[model]} steps')
    return plan


def main(argv=None) -> Dict[str, dict]:
    args = parse_args(argv)
    if args.resolution_report:
        print(write_resolution_report(args.out_dir))
        return {}
    models = args.models or PROTOCOLS[args.protocol]['models']
    work_root = osp.abspath(
        args.work_dir
        or osp.join(REPO, 'work_dirs', f'fashion_mnist_{args.protocol}'))
    os.makedirs(work_root, exist_ok=True)
    if args.import_runs:
        print(f'{import_runs(work_root, args.import_runs)} run(s) imported '
              f'into {work_root}')
    options = list(args.cfg_options or [])
    parsed = parse_cfg_options(options)
    # The protocol's schedule and size, read from its first model's config.
    cfg = load_config(config_path(args.protocol, models[0]), parsed)
    base_images = train_set_size(cfg)
    seeds = args.seeds or [int(cfg.get('randomness', {}).get('seed') or 0)]
    if args.holdout >= base_images:
        raise SystemExit(f'--holdout {args.holdout} leaves no training '
                         f'image of {base_images:,}')
    sizes = args.train_images or [base_images - args.holdout]
    if args.cost_report:
        print(write_cost_report(args, work_root, options, cfg, base_images))
        return {}
    plan = plan_runs(args, models, cfg, base_images, sizes, seeds,
                     work_root, options)

    command = 'python tools/benchmark_accuracy.py ' + ' '.join(
        sys.argv[1:] if argv is None else argv)
    commands = [c for c in record_command(work_root, command)
                if '--report-only' not in c]
    results = {}
    if not args.report_only:
        for run, schedule in plan:
            results[run.name] = run_one(args.protocol, run, schedule,
                                        work_root, options)

    # The protocol's page: its own schedule, lr and test set only.
    finished = [r for r in collect_results(work_root)
                if r.get('on_protocol', True)]
    if not finished:
        if args.report_only or not results:
            raise SystemExit(f'no finished run of the protocol\'s schedule '
                             f'under {work_root}')
        print(f'no run of the protocol\'s own schedule under {work_root} '
              'yet: no protocol page written (--cost-report writes the '
              'budgets\' page)')
        return results
    first_seed = min(r['seed'] for r in finished)
    convergence_runs = sorted(
        (r for r in finished
         if r['train_images'] == base_images and r['seed'] == first_seed),
        key=lambda r: model_order(r['model']))
    convergence = None
    os.makedirs(args.out_dir, exist_ok=True)
    if convergence_runs:
        convergence = plot(
            convergence_runs, work_root,
            osp.join(args.out_dir, f'fashion_mnist_{args.protocol}.png'))
    text = write_report(args.protocol, finished, base_images, convergence,
                        args.out_dir, commands)
    print(text)
    return results


if __name__ == '__main__':
    main()
