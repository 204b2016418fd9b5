"""Train a model: mmpretrain's ``tools/train.py`` command line, plus
``--amp`` on the CPU (bfloat16), DDP on the CPU (gloo) and config mistakes
explained (see :mod:`lect_mm.engine`)."""
import argparse
import os
import os.path as osp
import time

import lect_mm  # noqa: F401,I001  (first: registers modules, quiets warnings)
from lect_mm import silence_known_log_messages
from mmengine.config import Config, DictAction
from mmengine.device import get_device
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from lect_mm.engine import (LAUNCHERS, distributed_context,
                            explain_config_errors)


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
        'checkpoint in the work directory')
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
    parser.add_argument(
        '--launcher', choices=LAUNCHERS, default='none', help='job launcher')
    # torchrun (torch >= 2.0) passes --local-rank; older launchers pass
    # --local_rank.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def merge_args(cfg, args):
    """Merge the command-line arguments into the config."""
    if args.no_validate:
        cfg.val_cfg = None
        cfg.val_dataloader = None
        cfg.val_evaluator = None

    cfg.launcher = args.launcher

    # work_dir: command line > config > ./work_dirs/<config name>
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])

    if args.amp:
        # AmpOptimWrapper on accelerators, bfloat16 autocast on the CPU.
        cfg.optim_wrapper.type = 'DeviceAmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')

    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume

    if args.auto_scale_lr:
        cfg.auto_scale_lr.enable = True

    # Pinned memory only helps copies to an accelerator.
    pin_memory = not args.no_pin_memory and get_device() != 'cpu'

    def set_default_dataloader_cfg(field):
        if cfg.get(field, None) is None:
            return
        loader = cfg[field]
        loader.setdefault('collate_fn', dict(type='default_collate'))
        loader.setdefault('pin_memory', pin_memory)
        # persistent_workers needs worker processes.
        if loader.get('num_workers', 0) > 0:
            loader.setdefault('persistent_workers', True)
        if args.no_pin_memory:
            loader.pin_memory = False
        if args.no_persistent_workers:
            loader.persistent_workers = False

    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        set_default_dataloader_cfg(field)

    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)

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
    cfg = Config.fromfile(args.config)
    cfg = merge_args(cfg, args)

    start = time.time()
    with distributed_context(cfg), explain_config_errors(cfg):
        if 'runner_type' not in cfg:
            runner = Runner.from_cfg(cfg)
        else:
            runner = RUNNERS.build(cfg)
        silence_known_log_messages(runner.logger)
        runner.train()
        runner.logger.info(f'Training took {time.time() - start:.1f} s; '
                           f'results in {osp.abspath(cfg.work_dir)}')
    return runner


if __name__ == '__main__':
    main()
