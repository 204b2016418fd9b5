"""Hooks that stand alone: exact resume (``RNGStateHook``), stopping a
diverging run (``NonFiniteLossHook``: mmengine trains on through a NaN loss,
ends with status 0 and may save the NaN model as the best checkpoint) and
compiling the model's heavy submodules in place (``CompileModelHook``)."""
import random
from typing import Optional

import numpy as np
import torch
from mmengine.dist import all_reduce
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from .checkpoint_io import from_plain, has_plain
from .checkpoints import checkpoints_of
from .loading import unwrap_model


def get_rng_state() -> dict:
    """The state of every global random generator a training step may use."""
    state = dict(python=random.getstate(), numpy=np.random.get_state(),
                 torch=torch.get_rng_state())
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore :func:`get_rng_state`'s state (``Runner.resume`` may have
    mapped its tensors to a GPU)."""
    random.setstate(state['python'])
    np.random.set_state(state['numpy'])
    torch.set_rng_state(state['torch'].cpu())
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state['cuda']])


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Save the random generators' state in each checkpoint and restore it
    on resume (mmengine re-seeds them): a resumed run ends as one that never
    stopped. An epoch's end state is restored before the next epoch (also
    without a resume: validation changes nothing) and again once the
    loader's iterator exists (it draws a seed). Persistent workers' state
    cannot be saved: their sampler must be ``SeededSampler``."""

    priority = 'VERY_HIGH'

    def __init__(self) -> None:
        self._state: Optional[dict] = None
        self._state_epoch: Optional[int] = None  # the epoch it begins
        self._restore_at_first_iter = False

    def after_train_epoch(self, runner) -> None:
        self._state = get_rng_state()
        self._state_epoch = runner.epoch + 1

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        meta = checkpoint.get('meta', {})
        if self._state is not None and not meta.get('inner_iter') and \
                self._state_epoch == meta.get('epoch'):
            checkpoint['rng_state'] = self._state
        else:  # inside an epoch: the state now, between two iterations
            checkpoint['rng_state'] = get_rng_state()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if 'rng_state' in checkpoint:
            state = checkpoint['rng_state']  # plain from mmengine's loader
            self._state = from_plain(state) if has_plain(state) else state
            self._state_epoch = checkpoint.get('meta', {}).get('epoch')

    def before_train_epoch(self, runner) -> None:
        # only the previous epoch's state (not a load_from checkpoint's)
        self._restore_at_first_iter = False
        if self._state is not None and self._state_epoch == runner.epoch:
            set_rng_state(self._state)
            self._restore_at_first_iter = True

    def before_train_iter(self, runner, batch_idx: int,
                          data_batch=None) -> None:
        if self._restore_at_first_iter:
            set_rng_state(self._state)
            self._restore_at_first_iter = False


class DivergenceError(RuntimeError):
    """Training diverged: the loss or the weights are not finite."""


def _non_finite(tensors) -> list:
    """The names of the floating-point tensors that are not finite."""
    return [name for name, t in tensors if torch.is_tensor(t)
            and t.is_floating_point() and not torch.isfinite(t).all()]


def _on_any_rank(flag: bool) -> bool:
    """Whether ``flag`` is true on any rank (a collective call)."""
    flag = torch.tensor(float(flag))
    all_reduce(flag, op='max')  # no-op on one process
    return bool(flag.item())


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Raise :class:`DivergenceError` (naming the iteration, learning rate
    and last checkpoint) after ``patience`` non-finite losses in a row (more
    than 1 tolerates mixed precision's odd overflow, which the loss scaler
    skips), at the end of an epoch with non-finite weights, and before a
    checkpoint of such weights is written; the ranks decide together. Off:
    ``enabled=False`` (mmengine accepts None only for its own hooks)."""

    # after LoggerHook, before ParamSchedulerHook (the learning rate named
    # is the one used) and CheckpointHook
    priority = 65

    def __init__(self, patience: int = 3, enabled: bool = True) -> None:
        if not isinstance(patience, int) or patience < 1:
            raise ValueError('NonFiniteLossHook: patience must be an int '
                             f'>= 1, got {patience!r}')
        self.patience = patience
        self.enabled = enabled
        self._in_a_row = 0

    def _diverged(self, runner, what: str, iteration: int):
        """The error; ``iteration`` counts from 1, as in the log."""
        where = f'iteration {iteration}'
        if getattr(runner.train_loop, 'max_epochs', None) is not None:
            where += f' (epoch {runner.epoch + 1})'
        lrs = []
        for name, values in runner.optim_wrapper.get_lr().items():
            text = ', '.join(f'{v:.4g}' for v in dict.fromkeys(values))
            lrs.append(text if name == 'lr' else f'{name} {text}')
        return DivergenceError(
            f'Training diverged: {what} at {where}, learning rate '
            f'{"; ".join(lrs)}. The run was stopped before saving this '
            f'model; {checkpoints_of(runner).note()}. Lower the learning rate '
            '(optim_wrapper.optimizer.lr) or clip the gradients '
            '(optim_wrapper.clip_grad); default_hooks.non_finite_loss.'
            'patience sets how many non-finite losses in a row stop the run.')

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        loss = (outputs or {}).get('loss')
        if loss is None or not self.enabled:
            return
        loss = torch.as_tensor(loss).detach()
        non_finite = _on_any_rank(not bool(torch.isfinite(loss).all()))
        self._in_a_row = self._in_a_row + 1 if non_finite else 0
        if self._in_a_row >= self.patience:
            raise self._diverged(
                runner, f'the loss is {float(loss.float().sum())} for '
                f'{self._in_a_row} iteration(s) in a row', runner.iter + 1)

    def after_train_epoch(self, runner) -> None:
        if not self.enabled:
            return
        model = unwrap_model(runner.model)
        bad = _non_finite([*model.named_parameters(), *model.named_buffers()])
        if _on_any_rank(bool(bad)):
            raise self._diverged(
                runner, 'the weights are not finite at the end of the epoch '
                f'({", ".join(bad[:3]) or "on another rank"})', runner.iter)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        if not self.enabled:
            return
        bad = _non_finite(checkpoint.get('state_dict', {}).items())
        if bad:
            raise self._diverged(
                runner, 'the weights to be saved are not finite '
                f'({", ".join(bad[:3])})',
                checkpoint.get('meta', {}).get('iter', runner.iter))


def compile_submodules(model: torch.nn.Module, targets=('backbone', 'neck'),
                       **compile_kwargs) -> list:
    """``nn.Module.compile`` the submodules ``targets`` of ``model`` (not
    DDP) in place, keeping ``state_dict`` keys (no ``_orig_mod.``). A target
    that is None is skipped, a missing one raises; returns those compiled."""
    targets = (targets, ) if isinstance(targets, str) else tuple(targets)
    for name in targets:
        if not hasattr(model, name):
            raise AttributeError(
                f'{type(model).__name__} has no submodule {name!r} to '
                f'compile (targets={targets}).')
    compiled = [name for name in targets if getattr(model, name) is not None]
    for name in compiled:
        getattr(model, name).compile(**compile_kwargs)
    return compiled


@HOOKS.register_module()
class CompileModelHook(Hook):
    """:func:`compile_submodules` ``targets`` with ``compile_kwargs`` (of
    ``torch.compile``) once per run: ``tools/train.py`` turns ``compile=True``
    into it, not mmengine's compiled ``train_step`` (docs/pitfalls.md)."""

    priority = 'VERY_HIGH'

    def __init__(self, targets=('backbone', 'neck'), **compile_kwargs):
        self.targets = targets
        self.compile_kwargs = compile_kwargs

    def before_run(self, runner) -> None:
        compiled = compile_submodules(unwrap_model(runner.model),
                                      self.targets, **self.compile_kwargs)
        runner.logger.info(
            f'torch.compile({self.compile_kwargs or ""}) on '
            f'{", ".join(compiled)}: the first iterations, and the first of '
            'a new input shape (a smaller last batch), compile and are slow.')
