"""One training epoch of CIFAR-10-shaped data: CPU resize vs device resize.

The report trains on 32×32 images resized to 224 (LeCT report, Appendix). With
the resize in the CPU pipeline (``configs/_base_/datasets/cifar10.py``) every
sample becomes a 224×224×3 array that the workers must produce, collate and
copy; with ``configs/_base_/datasets/cifar10_device_resize.py`` the workers
stop at 32×32 and ``ResizeClsDataPreprocessor`` resizes the batch on the
device.
For each of the two, this script times on one device:

* loader only: one pass over the dataloader (workers, augmentation,
  collation), nothing else: how fast the CPU side alone can feed;
* training: one epoch of full training steps (data preprocessor, forward,
  loss, backward, clip, AdamW) fed by that loader, wall clock from the first
  batch request to the last step's completion (worker start-up included);
* model only: the same step on one batch already on the device, times the
  number of batches: the epoch time if data were free.

The data: ``--images`` random 32×32 RGB images held in memory in a small
mmpretrain dataset (so no files are read; CIFAR-10 itself is also held in
memory by mmpretrain), with the configs' own pipelines (RandomCrop pad 4,
flip, RandAugment, [Resize 224], PackInputs), sampler and collate function.

Examples::

    python benchmarks/data_pipeline.py --num-workers 8 --amp
    python benchmarks/data_pipeline.py --modes device --images 50000
    python benchmarks/data_pipeline.py --quick
"""
import argparse
import copy
import functools
import gc
import sys
import time
from typing import Dict, List

import numpy as np
import torch
from common import REPO_ROOT
from common.cli import layout_flags, new_parser, setup
from common.models import (MODEL_CONFIGS, TrainStep, build_classifier,
                           compile_model, load_config)
from common.report import Report, machine_header, markdown_table
from common.timing import fmt_rate, measure, synchronize
from mmpretrain.datasets import BaseDataset

DATASET_CONFIGS = {
    'cpu': 'configs/_base_/datasets/cifar10.py',
    'device': 'configs/_base_/datasets/cifar10_device_resize.py',
}


class InMemoryImages(BaseDataset):
    """``num_images`` random uint8 RGB images of ``img_size``², in memory.

    Items are ``dict(img=HxWx3 uint8, gt_label=int)`` like mmpretrain's
    CIFAR10, so the CIFAR pipelines apply unchanged.

    Args:
        num_images (int): Dataset length. Defaults to 50000.
        img_size (int): Image side. Defaults to 32.
        num_classes (int): Labels cycle through ``range(num_classes)``.
            Defaults to 10.
        seed (int): Seed of the pixel values. Defaults to 0.
        **kwargs: Arguments of :class:`mmpretrain.datasets.BaseDataset`
            (``pipeline``, ``test_mode`` ...).
    """

    def __init__(self,
                 num_images: int = 50000,
                 img_size: int = 32,
                 num_classes: int = 10,
                 seed: int = 0,
                 **kwargs) -> None:
        self.num_images = num_images
        self.img_size = img_size
        self.num_classes = num_classes
        self.seed = seed
        super().__init__(
            ann_file='',
            metainfo=dict(classes=[str(i) for i in range(num_classes)]),
            **kwargs)

    def load_data_list(self) -> List[dict]:
        rng = np.random.default_rng(self.seed)
        imgs = rng.integers(
            0, 256, (self.num_images, self.img_size, self.img_size, 3),
            dtype=np.uint8)
        return [
            dict(img=imgs[i], gt_label=i % self.num_classes)
            for i in range(self.num_images)
        ]


def parse_args(argv=None) -> argparse.Namespace:
    parser = new_parser(__doc__)
    parser.add_argument('--model', default='LeCT',
                        help=f'a report model ({", ".join(MODEL_CONFIGS)}) '
                        'or a config path; default LeCT')
    parser.add_argument('--modes', nargs='+', default=['cpu', 'device'],
                        choices=list(DATASET_CONFIGS),
                        help='where the resize runs (default both)')
    parser.add_argument('--images', type=int, default=50000,
                        help='epoch length (default 50000; --quick 32)')
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--img-size', type=int, default=224,
                        help='resize target (default 224)')
    parser.add_argument('--num-workers', type=int, default=None,
                        help='dataloader workers (default: the dataset '
                        "config's, 4)")
    parser.add_argument('--pin-memory', action='store_true',
                        help='pin host memory (the configs do not)')
    parser.add_argument('--amp', action='store_true', help='bf16 autocast')
    parser.add_argument('--channels-last', action='store_true')
    parser.add_argument('--compile', action='store_true',
                        help='torch.compile the backbone and neck')
    parser.add_argument('--warmup', type=int, default=5,
                        help='untimed steps before the epoch (default 5)')
    parser.add_argument('--repeats', type=int, default=5,
                        help='timed steps of the model-only estimate')
    parser.add_argument('--no-loader-pass', action='store_true',
                        help='skip the separate loader-only pass before the '
                        'epoch (its columns show "–"): the run then costs '
                        'one epoch plus warm-up')
    parser.add_argument('--loader-only', action='store_true',
                        help='time only the data loader (no model): how '
                        'fast the CPU pipeline can feed a device')
    args = parser.parse_args(argv)
    if args.loader_only and args.no_loader_pass:
        parser.error('--loader-only and --no-loader-pass exclude each other')
    if args.quick:
        args.images, args.batch_size, args.img_size = 32, 16, 48
        # no warm-up step (the numbers mean nothing): the timed step runs
        # the same code
        args.warmup, args.repeats = 0, 1
        if args.num_workers is None:
            args.num_workers = 1
    return args


def _dataset_cfg(mode: str, img_size: int):
    """The dataset config of a mode, with the resize target set."""
    cfg = load_config(DATASET_CONFIGS[mode])
    pipeline = copy.deepcopy(cfg.train_dataloader.dataset.pipeline)
    for t in pipeline:
        if t['type'] == 'Resize':
            t['scale'] = img_size
    preprocessor = copy.deepcopy(cfg.data_preprocessor)
    if mode == 'device':
        preprocessor['size'] = img_size
    return cfg, pipeline, preprocessor


def _loader(cfg, pipeline, args):
    from mmengine.runner import Runner

    dataset = InMemoryImages(num_images=args.images, seed=args.seed,
                             pipeline=pipeline)
    workers = (args.num_workers if args.num_workers is not None else
               cfg.train_dataloader.num_workers)
    loader_cfg = dict(
        batch_size=args.batch_size,
        num_workers=workers,
        persistent_workers=False,
        pin_memory=args.pin_memory,
        sampler=copy.deepcopy(cfg.train_dataloader.sampler),
        dataset=dataset)
    if 'collate_fn' in cfg.train_dataloader:
        loader_cfg['collate_fn'] = cfg.train_dataloader.collate_fn
    return Runner.build_dataloader(loader_cfg, seed=args.seed), workers


def _time_loader(mode: str, loader):
    """One pass over ``loader``: (seconds, images, first batch)."""
    print(f'[{mode}] loader only', file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    n = 0
    first = None
    for batch in loader:
        n += len(batch['inputs'])
        if first is None:
            first = batch
    return time.perf_counter() - t0, n, first


def run_mode(mode: str, args, device: torch.device) -> Dict:
    import cv2

    # as the runtime's env_cfg (opencv_num_threads=0): no OpenCV threads
    # inside the dataloader workers
    cv2.setNumThreads(0)
    cfg, pipeline, preprocessor = _dataset_cfg(mode, args.img_size)
    if args.loader_only:
        loader, workers = _loader(cfg, pipeline, args)
        loader_s, n, _ = _time_loader(mode, loader)
        return dict(loader_s=loader_s, loader_images=n, workers=workers)
    model_config = MODEL_CONFIGS.get(args.model, args.model)
    mcfg = load_config(model_config)
    mcfg.model.data_preprocessor = preprocessor
    model = build_classifier(mcfg).to(device).train()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if args.compile:
        compile_model(model)
    step = TrainStep(model, device, amp=args.amp,
                     channels_last=args.channels_last)
    loader, workers = _loader(cfg, pipeline, args)

    if args.no_loader_pass:
        loader_s, n, first = None, 0, next(iter(loader))
    else:
        loader_s, n, first = _time_loader(mode, loader)

    # model only: warms up (compilation, cuDNN) for the epoch too
    print(f'[{mode}] warm-up / model only', file=sys.stderr, flush=True)
    data = model.data_preprocessor(first, training=True)
    n_batches = len(loader)
    stats = measure(
        functools.partial(step, data['inputs'], data['data_samples']),
        device, args.warmup, args.repeats)
    full = data['inputs'].shape[0]
    model_only_s = stats.median * (args.images / full)

    # one training epoch fed by the loader
    print(f'[{mode}] training epoch', file=sys.stderr, flush=True)
    synchronize(device)
    t0 = time.perf_counter()
    seen = 0
    for batch in loader:
        data = model.data_preprocessor(batch, training=True)
        step(data['inputs'], data['data_samples'])
        seen += len(batch['inputs'])
    synchronize(device)
    train_s = time.perf_counter() - t0
    shape = tuple(data['inputs'].shape[1:])
    del model, step, loader, data
    gc.collect()
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    if args.compile:
        torch._dynamo.reset()
    return dict(loader_s=loader_s, train_s=train_s, images=seen,
                loader_images=n, model_only_s=model_only_s,
                batches=n_batches, workers=workers, shape=shape)


def main(argv=None) -> Report:
    args = parse_args(argv)
    device = setup(args)
    report = Report('data_pipeline', args.out)
    report.add(machine_header(device, 'Data pipeline: CPU vs device resize'))
    results = {mode: run_mode(mode, args, device) for mode in args.modes}

    labels = {
        'cpu': f'CPU pipeline (Resize {args.img_size})',
        'device': f'device (ResizeClsDataPreprocessor {args.img_size})',
    }
    rows = []
    for mode, r in results.items():
        if args.loader_only:
            rows.append([
                labels[mode], f'{r["loader_s"]:.1f}',
                fmt_rate(r['loader_images'] / r['loader_s'])
            ])
            continue
        loader_cells = ['–', '–'] if r['loader_s'] is None else [
            f'{r["loader_s"]:.1f}',
            fmt_rate(r['loader_images'] / r['loader_s'])
        ]
        rows.append([
            labels[mode], *loader_cells,
            f'{r["train_s"]:.1f}', fmt_rate(r['images'] / r['train_s']),
            f'{r["model_only_s"]:.1f}',
            f'{r["train_s"] / r["model_only_s"]:.2f}'
        ])
    any_r = next(iter(results.values()))
    flags = [f'batch {args.batch_size}', f'{any_r["workers"]} workers',
             'bf16 autocast' if args.amp else 'fp32']
    if args.pin_memory:
        flags.append('pin_memory')
    flags += layout_flags(args)
    model_name = args.model if args.model in MODEL_CONFIGS else \
        args.model.replace(REPO_ROOT + '/', '')
    if args.loader_only:
        report.add(f'### Data loader alone, {args.images:,} 32×32 images '
                   f'(batch {args.batch_size}, {any_r["workers"]} workers)')
        report.add()
        report.add(markdown_table(['Resize', 'Loader only s',
                                   'Loader images/s'], rows))
        report.add()
        report.add('One pass over the dataloader (RandomCrop pad 4, flip, '
                   'RandAugment, [Resize], PackInputs, collate), worker '
                   'start-up included; no model, no transfer.')
        report.add()
        report.save()
        return report
    report.add(f'### One epoch of {args.images:,} 32×32 images, {model_name} '
               f'({", ".join(flags)})')
    report.add()
    report.add(
        markdown_table([
            'Resize', 'Loader only s', 'Loader images/s', 'Training s/epoch',
            'Training images/s', 'Model only s', 'Training / model only'
        ], rows))
    report.add()
    report.add('Loader only: one pass over the dataloader (RandomCrop pad 4, '
               'flip, RandAugment, [Resize], PackInputs, collate), no '
               'transfer. Training: one epoch of full steps fed by a fresh '
               'loader (worker start-up included). Model only: median step '
               'time on one batch already on the device × batches; a '
               'training/model-only ratio near 1 means the model is the '
               'bottleneck, above 1 the data pipeline is.')
    report.add()
    report.save()
    return report


if __name__ == '__main__':
    main()
