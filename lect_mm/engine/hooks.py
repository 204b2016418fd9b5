"""Hooks: exact resume (``RNGStateHook``) and in-place compilation of the
model's heavy submodules (``CompileModelHook``)."""
import random
from typing import Optional

import numpy as np
import torch
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from .loading import unwrap_model
from .plain_state import from_plain


def get_rng_state() -> dict:
    """The state of every global random generator a training step may use."""
    state = dict(
        python=random.getstate(),
        numpy=np.random.get_state(),
        torch=torch.get_rng_state())
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore a state returned by :func:`get_rng_state`.

    The state tensors may come back on a GPU (``Runner.resume`` maps the
    whole checkpoint to the training device); the setters need CPU tensors.
    """
    random.setstate(state['python'])
    np.random.set_state(state['numpy'])
    torch.set_rng_state(state['torch'].cpu())
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state['cuda']])


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Save the random generators' state with the checkpoint and restore it
    on resume, so that a run resumed from the checkpoint of epoch ``k`` ends
    with the same weights as one that never stopped.

    mmengine re-seeds the generators from ``randomness.seed`` when it
    resumes, so without this hook augmentation (numpy), drop-path/dropout
    (torch) and every other random draw of epoch ``k + 1`` differ from the
    uninterrupted run. The sampler order is already resumable (the
    ``DefaultSampler`` seeds its permutation with ``seed + epoch``).

    The hook snapshots the generators at the end of each training epoch,
    before ``CheckpointHook`` saves, stores the snapshot in the checkpoint
    (key ``'rng_state'``), and restores it at the start of the next training
    epoch. Restoring also in the uninterrupted run makes validation, which
    runs between the two and draws from the generators (a ``DataLoader``
    iterator draws its base seed), invisible to training: enabling or
    spacing validation no longer changes the trained weights either.

    The state is restored a second time before the first iteration of the
    epoch, after the loader's iterator has been created (see
    ``before_train_iter``), so that the model's draws do not depend on the
    loader settings either.

    A checkpoint written inside an epoch (``meta['inner_iter']`` > 0, the
    iterations of epoch ``meta['epoch']`` already done: a run stopped by a
    signal) holds the state between those iterations and the next; it is
    restored the same way, before the first iteration the resumed epoch
    runs.

    Note:
        The guarantee holds for checkpoints written between two iterations
        (every checkpoint of ``LectRunner``). The random state
        inside persistent worker processes cannot be saved: with
        ``persistent_workers=True`` the training sampler must be
        :class:`~lect_mm.datasets.SeededSampler` (the shipped configs' one),
        which seeds every sample's augmentation from (seed, epoch, index).
    """

    priority = 'VERY_HIGH'

    def __init__(self) -> None:
        self._state: Optional[dict] = None
        self._state_epoch: Optional[int] = None
        self._restore_at_first_iter = False

    def after_train_epoch(self, runner) -> None:
        self._state = get_rng_state()
        self._state_epoch = runner.epoch + 1

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        meta = checkpoint.get('meta', {})
        if self._state is not None and not meta.get('inner_iter') and \
                self._state_epoch == meta.get('epoch'):
            checkpoint['rng_state'] = self._state
        else:
            # inside an epoch (a run stopped by a signal): the state now,
            # between two iterations
            checkpoint['rng_state'] = get_rng_state()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if 'rng_state' in checkpoint:
            # saved as plain data by SafeCheckpointHook, whose decoding may
            # run after this hook (a lower priority)
            self._state = from_plain(checkpoint['rng_state'])
            self._state_epoch = checkpoint.get('meta', {}).get('epoch')

    def before_train_epoch(self, runner) -> None:
        # Only the state saved at the end of the epoch that precedes this
        # one applies: a checkpoint of another epoch (``load_from`` for
        # fine-tuning) must not set the generators.
        self._restore_at_first_iter = False
        if self._state is not None and self._state_epoch == runner.epoch:
            set_rng_state(self._state)
            self._restore_at_first_iter = True

    def before_train_iter(self, runner, batch_idx: int,
                          data_batch=None) -> None:
        # Again once the epoch's loader iterator exists: creating one draws
        # the workers' base seed from torch's generator, which a persistent
        # loader does in its first epoch only -- the first epoch after a
        # resume, but not the same epoch of an uninterrupted run.
        if self._restore_at_first_iter:
            set_rng_state(self._state)
            self._restore_at_first_iter = False


def compile_submodules(model: torch.nn.Module,
                       targets=('backbone', 'neck'),
                       **compile_kwargs) -> list:
    """``nn.Module.compile`` the named submodules of ``model`` in place.

    In place, so the module tree and the ``state_dict`` keys do not change
    (``torch.compile(module)`` would wrap it and prefix ``_orig_mod.``).

    Args:
        model (nn.Module): The model, unwrapped (no DDP wrapper).
        targets (Sequence[str]): Attribute names of the submodules; one
            that is None on the model is skipped, a name the model lacks
            raises. Defaults to ``('backbone', 'neck')``.
        **compile_kwargs: Passed to ``torch.compile``.

    Returns:
        list[str]: The names that were compiled.
    """
    if not hasattr(torch.nn.Module, 'compile'):
        raise RuntimeError('Compiling in place needs torch >= 2.2 '
                           f'(nn.Module.compile); this is torch '
                           f'{torch.__version__}.')
    if isinstance(targets, str):
        targets = (targets, )
    compiled = []
    for name in targets:
        if not hasattr(model, name):
            raise AttributeError(
                f'{type(model).__name__} has no submodule {name!r} to '
                f'compile (targets={tuple(targets)}).')
        module = getattr(model, name)
        if module is None:
            continue
        module.compile(**compile_kwargs)
        compiled.append(name)
    return compiled


@HOOKS.register_module()
class CompileModelHook(Hook):
    """``torch.compile`` the model's heavy submodules in place, once per run.

    mmengine's switch (``compile=True`` in a config) compiles the runner's
    whole ``model.train_step``: dynamo then also traces the data
    preprocessor, the loss parsing, the optimizer wrapper and mmengine's
    logging, which is recompiled for every new logged value until dynamo's
    recompile limit (8) is hit. This hook compiles only ``targets`` (by
    default the backbone and the neck, where the time goes) with
    :meth:`torch.nn.Module.compile`, which compiles in place: the module
    tree and the ``state_dict`` keys stay as they are (no ``_orig_mod.``
    prefix), so checkpoints of compiled and eager runs are interchangeable
    and resume works across the switch.

    ``tools/train.py`` turns a config's ``compile=True`` (or
    ``compile=dict(...)``, torch.compile's arguments) into this hook, so the
    usual switch takes this path; with other tools add it yourself:
    ``custom_hooks = [dict(type='CompileModelHook', mode='max-autotune')]``.

    Args:
        targets (Sequence[str]): Attribute names of the submodules to compile.
            A target that is None on the model (a classifier without neck) is
            skipped; a name the model lacks raises. Defaults to
            ``('backbone', 'neck')``.
        **compile_kwargs: Passed to ``torch.compile`` (``backend``, ``mode``,
            ``dynamic``, ``fullgraph``, ``options``).
    """

    priority = 'VERY_HIGH'

    def __init__(self, targets=('backbone', 'neck'), **compile_kwargs):
        if isinstance(targets, str):
            targets = (targets, )
        self.targets = tuple(targets)
        self.compile_kwargs = compile_kwargs

    def before_run(self, runner) -> None:
        compiled = compile_submodules(unwrap_model(runner.model),
                                      self.targets,
                                      **self.compile_kwargs)
        runner.logger.info(
            f'torch.compile({self.compile_kwargs or ""}) on '
            f'{", ".join(compiled)}: the first iterations, and the first one '
            'of any new input shape (a smaller last batch without '
            'drop_last), compile and are slow.')
