"""Train a model: mmpretrain's ``tools/train.py`` command line, plus
``--amp`` on the CPU (bfloat16), DDP on the CPU (gloo) and config mistakes
explained (see :mod:`lect_mm.engine`)."""
import argparse
import os.path as osp
import time

import lect_mm  # noqa: F401,I001  (first: registers modules, lect_mm::)
from mmengine.config import DictAction

from lect_mm.cli import (exit_launched_process, load_config, merge_cfg_options,
                         parse_launcher_args, runner_context,
                         set_dataloader_defaults, set_work_dir)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument(
        '--work-dir',
        help='the dir to save logs and models; defaults to '
        './work_dirs/<config name>')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint; without a path, from the latest '
        'checkpoint in the work directory (if it is damaged, the run stops '
        'and names the newest intact one; with nothing to resume it starts '
        'from scratch, with a warning)')
    parser.add_argument(
        '--resume-intact',
        action='store_true',
        help='like --resume without a path, but if the latest checkpoint is '
        'damaged, resume from the newest intact epoch_*/iter_* checkpoint')
    parser.add_argument(
        '--amp',
        action='store_true',
        help='automatic mixed precision (float16 on GPUs, bfloat16 on CPUs)')
    parser.add_argument(
        '--no-validate',
        action='store_true',
        help='do not evaluate the checkpoints during training')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the learning rate by the actual total batch size over '
        'auto_scale_lr.base_batch_size')
    parser.add_argument(
        '--no-pin-memory',
        action='store_true',
        help='disable the pin_memory option of the dataloaders')
    parser.add_argument(
        '--no-persistent-workers',
        action='store_true',
        help='disable the persistent_workers option of the dataloaders')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value pairs merged into '
        'it, e.g. model.backbone.drop_path_rate=0.2 '
        'train_dataloader.batch_size=32; lists as key="[a,b]" or key=a,b '
        '(quotation marks needed, no white space)')
    return parse_launcher_args(parser, argv)


def merge_args(cfg, args):
    """Merge the command-line arguments into the config."""
    if args.no_validate:
        cfg.val_cfg = None
        cfg.val_dataloader = None
        cfg.val_evaluator = None

    cfg.launcher = args.launcher
    set_work_dir(cfg, args.work_dir, args.config)

    if args.amp:
        # AmpOptimWrapper on accelerators, bfloat16 autocast on the CPU.
        cfg.optim_wrapper.type = 'DeviceAmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')

    if args.resume == 'auto' or args.resume_intact:
        cfg.resume = True
        cfg.load_from = None
        cfg.resume_intact = args.resume_intact
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume

    if args.auto_scale_lr:
        cfg.auto_scale_lr.enable = True

    set_dataloader_defaults(
        cfg, ('train_dataloader', 'val_dataloader', 'test_dataloader'),
        pin_memory=not args.no_pin_memory,
        persistent_workers=not args.no_persistent_workers)

    merge_cfg_options(cfg, args.cfg_options, reads=('compile', ))

    # compile=True / compile=dict(...): compile the backbone and neck in
    # place instead of mmengine's whole train_step (see CompileModelHook).
    compile_cfg = cfg.get('compile', None)
    if compile_cfg:
        kwargs = {} if compile_cfg is True else dict(compile_cfg)
        cfg.custom_hooks = list(cfg.get('custom_hooks', None) or []) + [
            dict(type='CompileModelHook', **kwargs)
        ]
        cfg.compile = None
    return cfg


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config)
    cfg = merge_args(cfg, args)

    start = time.time()
    with runner_context(cfg) as runner:
        runner.train()
        runner.logger.info(f'Training took {time.time() - start:.1f} s; '
                           f'results in {osp.abspath(cfg.work_dir)}')
    return runner


if __name__ == '__main__':
    exit_launched_process(main)
