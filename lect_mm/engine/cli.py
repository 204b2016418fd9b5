"""What ``tools/train.py`` and ``tools/test.py`` share.

The launcher arguments (and the ``LOCAL_RANK`` export), the work directory
fallback, the dataloader defaults and the building of the runner: the
config checked first (:func:`~lect_mm.engine.check_config`), then built
inside :func:`~lect_mm.engine.dist.distributed_context` and
:func:`~lect_mm.engine.explain_config_errors`.
"""
import argparse
import os
import os.path as osp
import time
from contextlib import contextmanager
from typing import Iterable, Iterator, List, Optional

from mmengine.config import Config
from mmengine.device import get_device
from mmengine.logging import MMLogger
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from lect_mm._warnings import silence_known_log_messages
from .config_check_hook import ConfigCheckHook, explain_empty_epoch
from .config_tree import (ConfigMismatchError, check_config,
                          explain_config_errors)
from .dist import LAUNCHERS, distributed_context


def parse_launcher_args(parser: argparse.ArgumentParser,
                        argv: Optional[List[str]] = None
                        ) -> argparse.Namespace:
    """Add ``--launcher`` and ``--local-rank`` to ``parser`` and parse.

    ``LOCAL_RANK`` is exported from ``--local-rank`` when no launcher has
    set it (mmengine reads the environment, not the argument).

    Args:
        parser (argparse.ArgumentParser): The tool's parser, holding its own
            arguments.
        argv (list[str], optional): The arguments; None reads
            ``sys.argv``.

    Returns:
        argparse.Namespace: The parsed arguments.
    """
    parser.add_argument(
        '--launcher', choices=LAUNCHERS, default='none', help='job launcher')
    # torchrun (torch >= 2.0) passes --local-rank; older launchers pass
    # --local_rank.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def set_work_dir(cfg: Config, work_dir: Optional[str],
                 config_file: str) -> None:
    """Set ``cfg.work_dir``: command line > config > ``./work_dirs/<name>``.

    Args:
        cfg (Config): The config, changed in place.
        work_dir (str, optional): ``--work-dir``.
        config_file (str): The config's path; its file name without the
            extension names the default directory.
    """
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(config_file))[0])


def set_dataloader_defaults(cfg: Config,
                            fields: Iterable[str],
                            pin_memory: bool = True,
                            persistent_workers: Optional[bool] = None
                            ) -> None:
    """Fill the defaults of the tools into the dataloader configs.

    Each loader gets ``collate_fn=dict(type='default_collate')`` and
    ``pin_memory`` (on only where an accelerator is used: pinned memory only
    helps copies to one) unless it sets them; a loader that is None or
    absent is skipped.

    Args:
        cfg (Config): The config, changed in place.
        fields (Iterable[str]): The loaders, e.g. ``('test_dataloader', )``.
        pin_memory (bool): False turns ``pin_memory`` off in every loader
            (``--no-pin-memory``). Defaults to True.
        persistent_workers (bool, optional): True makes
            ``persistent_workers`` default to on where a loader has worker
            processes (it needs them); False turns it off in every loader
            (``--no-persistent-workers``); None leaves it to the config.
            Defaults to None.
    """
    pin_default = pin_memory and get_device() != 'cpu'
    for field in fields:
        if cfg.get(field, None) is None:
            continue
        loader = cfg[field]
        loader.setdefault('collate_fn', dict(type='default_collate'))
        loader.setdefault('pin_memory', pin_default)
        if not pin_memory:
            loader.pin_memory = False
        if persistent_workers is None:
            continue
        if not persistent_workers:
            loader.persistent_workers = False
        elif loader.get('num_workers', 0) > 0:
            loader.setdefault('persistent_workers', True)


def exit_launched_process(main) -> None:
    """Run a tool's ``main()``; a process started by a launcher (``torchrun``
    sets ``LOCAL_RANK``) then leaves with ``os._exit`` once its output is
    flushed. The process group is already destroyed by then, but letting the
    interpreter unwind gloo's threads and the loaders' workers occasionally
    aborts a finished rank at exit ("terminate called without an active
    exception", SIGABRT), which turns a finished run into a failed one. A
    ``SystemExit`` with an integer status (a training stopped by a signal
    leaves with 75) leaves the same way, with that status."""
    import logging
    import sys
    status = 0
    try:
        main()
    except SystemExit as exit_:
        if 'LOCAL_RANK' not in os.environ or not isinstance(
                exit_.code, int):
            raise
        status = exit_.code
    if 'LOCAL_RANK' not in os.environ:
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def set_unique_experiment_name(cfg: Config) -> None:
    """Never let a run reuse a run name this process has used.

    mmengine names a run ``<experiment_name or config file name>_<start
    time>`` and keys its logger and visualizer by that name, so a second run
    of a config started in the same second would write its log and scalars
    into the first run's files. When that name is taken, ``experiment_name``
    becomes ``<prefix>_<i>`` with the first free ``i``; otherwise the config
    is left as it is.
    """
    stamp = time.strftime('%Y%m%d_%H%M%S', time.localtime())
    prefix = cfg.get('experiment_name') or (osp.splitext(
        osp.basename(cfg.filename))[0] if cfg.filename else None)
    if not MMLogger.check_instance_created(
            f'{prefix}_{stamp}' if prefix else stamp):
        return
    prefix, i = prefix or 'run', 1
    while MMLogger.check_instance_created(f'{prefix}_{i}_{stamp}'):
        i += 1
    cfg.experiment_name = f'{prefix}_{i}'


@contextmanager
def runner_context(cfg: Config) -> Iterator[Runner]:
    """Build the runner of ``cfg`` and hand it to the ``with`` body.

    The config is checked first (:func:`~lect_mm.engine.check_config`);
    building and the body run inside
    :func:`~lect_mm.engine.dist.distributed_context` (CPU DDP, process group
    torn down) and :func:`~lect_mm.engine.explain_config_errors` (config
    mistakes named; an epoch of no iterations too), and the runner gets a
    :class:`~lect_mm.engine.ConfigCheckHook` (classes and head width checked
    before the first iteration). ``cfg.runner_type`` picks a registered
    runner; without it mmengine's :class:`~mmengine.runner.Runner` is used.

    Args:
        cfg (Config): The full config.

    Yields:
        Runner: The runner, its logger quieted of known deprecation lines.
    """
    set_unique_experiment_name(cfg)
    check_config(cfg)
    with distributed_context(cfg), explain_config_errors(cfg):
        if 'runner_type' not in cfg:
            runner = Runner.from_cfg(cfg)
        else:
            runner = RUNNERS.build(cfg)
        silence_known_log_messages(runner.logger)
        if not any(isinstance(h, ConfigCheckHook) for h in runner.hooks):
            runner.register_hook(ConfigCheckHook())
        try:
            yield runner
        except AssertionError as error:
            problem = explain_empty_epoch(error, runner)
            if problem is None:
                raise
            raise ConfigMismatchError(problem) from error
