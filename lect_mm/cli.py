"""What ``tools/train.py`` and ``tools/test.py`` share, the tools layer of
docs/architecture.md: the config file (:func:`load_config`),
``--cfg-options`` (:func:`merge_cfg_options`) and the config's values
(:func:`check_config`) with their mistakes named, the launcher arguments,
the work directory, the dataloader defaults, the process exit and the
building of the runner (:func:`runner_context`)."""
import argparse
import collections.abc
import functools
import inspect
import logging
import os
import os.path as osp
import re
import sys
import time
import types
import typing
from contextlib import contextmanager
from typing import Iterable, Iterator, List, Optional

import torch
from mmengine.config import Config
from mmengine.device import get_device
from mmengine.logging import MMLogger
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from lect_mm.config_errors import (explain_config_errors, explain_empty_epoch,
                                   find_class, suggest, unknown_type)
from lect_mm.engine.config_tree import (MISSING, ConfigError,
                                        ConfigMismatchError, as_dict, join,
                                        lookup, walk)
from lect_mm.launch import LAUNCHERS, distributed_context
from lect_mm.utils import init_arguments

# How mmengine's Runner reads a top-level key beyond its arguments.
_CFG_READ = re.compile(
    r"(?:self\.|(?<![\w.]))cfg(?:\.get\(\s*|\[\s*)'(\w+)'")
# mmengine's default hooks, which default_hooks updates by name
DEFAULT_HOOKS = ('runtime_info', 'timer', 'sampler_seed', 'logger',
                 'param_scheduler', 'checkpoint')


def _base_cycle(filename: str, chain: tuple = ()) -> Optional[List[str]]:
    """The files of a cycle of ``_base_`` files reached from ``filename``
    (the first one again at the end), or None.

    Package bases (``lect_mm::...``) are not followed: an installed package's
    configs name only its own files or other packages', never the user's,
    and locating them asks the package index each time."""
    path = osp.realpath(filename)
    if path in chain:
        return list(chain[chain.index(path):]) + [path]
    try:
        bases = [Config._get_cfg_path(base, path)[0]
                 for base in Config._get_base_files(path) if '::' not in base]
    except Exception:  # Config.fromfile will say what is wrong
        return None
    for base in bases:
        cycle = _base_cycle(base, chain + (path, ))
        if cycle:
            return cycle
    return None


def load_config(filename: str) -> Config:
    """``Config.fromfile(filename)``, once no chain of ``_base_`` files leads
    back to one of its files (mmengine would recurse into a
    ``RecursionError``): such a cycle raises :class:`ConfigError`."""
    cycle = _base_cycle(filename)
    if cycle:
        raise ConfigError(
            f'The _base_ files of {filename} form a cycle: '
            f'{" -> ".join(cycle)}. Remove one of these _base_ entries.')
    return Config.fromfile(filename)


@functools.lru_cache(maxsize=None)
def keys_read_by(runner: type) -> Optional[frozenset]:
    """The top-level config keys a runner class reads beyond its
    arguments, found where they are read: its ``config_keys``
    (``LectRunner.config_keys``) and the ``cfg.get('key')`` of its code
    and its bases' (mmengine's ``Runner`` reads ``sync_bn``,
    ``model_wrapper_cfg``...); None if that code cannot be read."""
    keys = set(getattr(runner, 'config_keys', ()))
    for cls in getattr(runner, '__mro__', (None, )):
        if cls is None or issubclass(cls, Runner):
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):  # no source, or no class
                return None
            keys.update(_CFG_READ.findall(source))
    return frozenset(keys) | set(init_arguments(runner))


def merge_cfg_options(cfg: Config, options: Optional[dict],
                      reads: Iterable[str] = ()) -> None:
    """``cfg.merge_from_dict(options)`` (``--cfg-options``), with an error
    naming the option when its top-level key is one nothing reads (a
    misspelt ``train_cfg``: not in the config, nor read by its runner
    (:func:`keys_read_by`), the tools (``runner_type``) or the calling tool,
    ``reads``) or when it indexes a list by name (mmengine says only "list
    indices must be integers or slices, not str")."""
    if not options:
        return
    runner = find_class(cfg.get('runner_type', None) or Runner) or Runner
    read = keys_read_by(runner)
    known = set(cfg.keys()) | set(read or ()) | {'runner_type', *reads}
    for option, value in options.items():
        key = option.split('.')[0]
        if read is not None and key not in known:
            raise ConfigError(
                f'--cfg-options {option}={value}: the config has no key '
                f'{key!r}, and no part of a run reads it, so it would '
                f'change nothing.{suggest(key, known)}')
    try:
        cfg.merge_from_dict(options)
    except TypeError as error:
        if 'list indices must be integers' not in str(error):
            raise
        plain = as_dict(cfg)
        for option in options:
            keys = option.split('.')
            for i in range(1, len(keys)):
                node = lookup(plain, '.'.join(keys[:i]))
                if isinstance(node, (list, tuple)) and not keys[i].isdigit():
                    raise ConfigError(
                        f'--cfg-options {option}: {".".join(keys[:i])} is a '
                        f'list of {len(node)} entries, not a dict; name the '
                        'entry by its index, e.g. '
                        f'{".".join(keys[:i] + ["0"] + keys[i:])}') from error
                if node is MISSING:
                    break
        raise


_NUMBERS = (int, float, torch.Tensor, type(None))
_SEQUENCES = (list, tuple, collections.abc.Sequence)


def _entries(hint):
    """The annotation of the entries of a sequence annotation, or None."""
    args = typing.get_args(hint)
    return args[0] if typing.get_origin(hint) in _SEQUENCES and args else None


def _takes(hint) -> Optional[str]:
    """What an annotation takes, in words, if no string is of it (numbers,
    None, dicts and sequences of them); None if a string may be, or the
    annotation is not understood."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    words = []
    for leaf in typing.get_args(hint) if union else (hint, ):
        if leaf in _NUMBERS:
            words.append('None' if leaf is type(None) else leaf.__name__)
        elif leaf is dict or typing.get_origin(leaf) in (
                dict, collections.abc.Mapping):
            words.append('dict')
        elif _entries(leaf) is not None and _takes(_entries(leaf)):
            words.append(f'a sequence of {_takes(_entries(leaf))}')
        else:
            return None
    if words == ['None']:
        return None
    return ' or '.join(sorted(words, key=lambda w: (w.startswith('a '), w)))


def _string_argument(cfg: dict) -> Optional[str]:
    """A string given to an argument annotated as numbers, dicts or
    sequences of them (``lr='abc'``; ``attn_cfg=[dict(sr_ratio=2)]``:
    ``--cfg-options`` leaves what is not a number a string, ``dict(...)``
    too), or as an entry of a sequence of them."""
    for path, node in walk(cfg):
        given = [(k, v) for k, v in node.items() if k != 'type' and (
            isinstance(v, str) or isinstance(v, (list, tuple))
            and any(isinstance(e, str) for e in v))]
        cls = find_class(node['type']) if given and 'type' in node else None
        try:
            hints = typing.get_type_hints(
                cls.__init__ if inspect.isclass(cls) else cls) if cls else {}
        except Exception:  # an annotation that does not evaluate
            hints = {}
        for key, value in given:
            takes = _takes(hints.get(key))
            where = f'{cls.__name__} takes {takes} for {key!r}' if takes \
                else None
            if where and isinstance(value, str):
                return f'{join(path, key)}={value!r}: {where}, not a string.'
            if where and 'a sequence of' in takes:
                i, entry = next((i, e) for i, e in enumerate(value)
                                if isinstance(e, str))
                return (f'{join(path, key)}[{i}]={entry!r}: {where}, not '
                        'a list of strings (--cfg-options reads dict(...) '
                        "as text: set an entry's keys one by one, "
                        f'{join(path, key)}.{i}.KEY=VALUE, or give the list '
                        'in a config file).')
    return None


def _untyped_hook(cfg: dict) -> Optional[str]:
    hooks = cfg.get('default_hooks')
    for name, hook in (hooks.items() if isinstance(hooks, dict) else ()):
        if isinstance(hook, dict) and 'type' not in hook:
            typed = {n for n, h in hooks.items()
                     if isinstance(h, dict) and 'type' in h}
            return (f'default_hooks.{name} = {hook} names no hook type: a '
                    "default hook is one of mmengine's, updated by name "
                    f'({", ".join(DEFAULT_HOOKS)}), or a new one with a '
                    f'type.{suggest(name, typed | set(DEFAULT_HOOKS))}')
    return None


def _empty_training(cfg: dict) -> Optional[str]:
    for key, unit in (('max_epochs', 'epochs'), ('max_iters', 'iterations')):
        value = lookup(cfg, f'train_cfg.{key}')
        if value is not MISSING and (isinstance(value, bool) or not (
                isinstance(value, int) and value > 0)):
            return (f'train_cfg.{key}={value!r}: the training loop needs a '
                    f'positive whole number of {unit}; with {value!r} it '
                    'would train nothing.')
    return None


def check_config(cfg) -> None:
    """Raise :class:`ConfigError` for a misspelt ``type``, a string given to
    an argument annotated as a number, a ``default_hooks`` entry without a
    ``type``, or a ``train_cfg.max_epochs``/``max_iters`` that is not a
    positive integer in ``cfg`` (Config or dict), before anything is built.
    """
    cfg = as_dict(cfg)
    problem = (unknown_type(cfg, misspelt=True) or _untyped_hook(cfg)
               or _empty_training(cfg) or _string_argument(cfg))
    if problem is not None:
        raise ConfigError(problem)


def parse_launcher_args(parser: argparse.ArgumentParser,
                        argv: Optional[List[str]] = None
                        ) -> argparse.Namespace:
    """Add ``--launcher`` and ``--local-rank`` to ``parser`` and parse
    ``argv``; export ``LOCAL_RANK`` (which mmengine reads) from
    ``--local-rank`` when no launcher has set it."""
    parser.add_argument(
        '--launcher', choices=LAUNCHERS, default='none', help='job launcher')
    # torchrun passes --local-rank; older launchers pass --local_rank.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def set_work_dir(cfg: Config, work_dir: Optional[str],
                 config_file: str) -> None:
    """Set ``cfg.work_dir``: ``--work-dir`` > config > ``./work_dirs/<config
    file name>``."""
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
    """Give each loader of ``fields`` in ``cfg`` that is set
    ``collate_fn=dict(type='default_collate')`` and ``pin_memory`` (on only
    with an accelerator) unless it sets them. ``pin_memory=False`` turns
    pinning off everywhere; ``persistent_workers`` True makes it default to
    on where a loader has workers, False turns it off, None leaves it."""
    pin_default = pin_memory and get_device() != 'cpu'
    for field in fields:
        loader = cfg.get(field, None)
        if loader is None:
            continue
        loader.setdefault('collate_fn', dict(type='default_collate'))
        loader.setdefault('pin_memory', pin_default)
        if not pin_memory:
            loader.pin_memory = False
        if persistent_workers is False:
            loader.persistent_workers = False
        elif persistent_workers and loader.get('num_workers', 0) > 0:
            loader.setdefault('persistent_workers', True)


def exit_launched_process(main, argv: Optional[List[str]] = None) -> None:
    """Run a tool's ``main(argv)`` (default: the command line's). A rank of
    a distributed run (``--launcher`` other than ``none``) then leaves with
    ``os._exit`` once its output is flushed, with the status of an integer
    ``SystemExit`` (75 when preempted), since unwinding gloo's threads and
    the loaders' workers occasionally aborts a finished rank
    (docs/pitfalls.md). Any other process (``python tools/train.py``,
    ``runpy``, a sweep driver, a notebook) returns or raises as usual,
    ``LOCAL_RANK`` set or not."""
    argv = sys.argv[1:] if argv is None else list(argv)
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument('--launcher', default='none')
    if probe.parse_known_args(argv)[0].launcher == 'none':
        main(argv)
        return
    status = 0
    try:
        main(argv)
    except SystemExit as exit_:
        if not isinstance(exit_.code, int):
            raise
        status = exit_.code
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def set_unique_experiment_name(cfg: Config) -> None:
    """Give a run whose name (``<experiment_name or config file name>_<start
    time>``, which keys mmengine's logger and visualizer) this process has
    used ``experiment_name=<prefix>_<i>``, with the first free ``i``, so it
    never writes into another run's log and scalars."""
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
    """Build the runner of ``cfg`` (its ``runner_type``, else mmengine's
    ``Runner``) and hand it to the ``with`` body: ``cfg`` checked first
    (:func:`check_config`), building and body inside
    :func:`~lect_mm.launch.distributed_context` and
    :func:`explain_config_errors` (an epoch of no iterations named too).
    The runner's own hooks are its runtime's: ``LectRunner`` registers
    lect_mm's checks, mmengine's ``Runner`` keeps mmengine's behaviour."""
    set_unique_experiment_name(cfg)
    check_config(cfg)
    with distributed_context(cfg), explain_config_errors(cfg):
        if 'runner_type' not in cfg:
            runner = Runner.from_cfg(cfg)
        else:
            runner = RUNNERS.build(cfg)
        try:
            yield runner
        except AssertionError as error:
            problem = explain_empty_epoch(error, runner)
            if problem is None:
                raise
            raise ConfigMismatchError(problem) from error
