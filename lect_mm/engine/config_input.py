"""The config a user hands the tools: the file (:func:`load_config`) and
``--cfg-options`` (:func:`merge_cfg_options`), mistakes in either named."""
import os.path as osp
from typing import List, Optional

from mmengine.config import Config
from mmengine.runner import Runner

from lect_mm.utils import init_arguments
from .config_tree import (MISSING, ConfigError, as_dict, find_class, lookup,
                          suggest)

# Top-level keys read by mmengine's Runner beyond its arguments, by
# lect_mm's runner and by the tools.
READ_KEYS = ('runner_type', 'model_wrapper_cfg', 'find_unused_parameters',
             'compile', 'activation_checkpointing', 'efficient_conv_bn_eval',
             'sync_bn', 'custom_imports', 'lock_work_dir', 'log_dir_only',
             'stop_signals', 'resume_intact', 'resume_schedule',
             'load_from_strict', 'tta_model', 'tta_pipeline')


def _base_cycle(filename: str, chain: tuple = ()) -> Optional[List[str]]:
    """The files of a cycle of ``_base_`` files reached from ``filename``
    (the first one again at the end), or None."""
    path = osp.realpath(filename)
    if path in chain:
        return list(chain[chain.index(path):]) + [path]
    try:
        bases = [Config._get_cfg_path(base, path)[0]
                 for base in Config._get_base_files(path)]
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


def merge_cfg_options(cfg: Config, options: Optional[dict]) -> None:
    """``cfg.merge_from_dict(options)`` (``--cfg-options``), with an error
    naming the option when its top-level key is one nothing reads (a
    misspelt ``train_cfg``) or when it indexes a list by name (mmengine says
    only "list indices must be integers or slices, not str")."""
    if not options:
        return
    runner = find_class(cfg.get('runner_type', None) or Runner) or Runner
    known = set(cfg.keys()) | set(READ_KEYS) | set(init_arguments(runner))
    for option, value in options.items():
        key = option.split('.')[0]
        if key not in known:
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
