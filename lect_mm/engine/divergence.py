"""Stop a diverging run (``NonFiniteLossHook``) before it saves or scores a
model with NaN or infinite weights.

mmengine trains on through a NaN loss: the run ends with exit status 0 and,
with ``save_best``, a NaN model saved as the best checkpoint.
"""
from typing import Optional

import torch
from mmengine.dist import all_reduce, is_distributed
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from .checkpoint_io import CheckpointError, latest_checkpoint
from .loading import unwrap_model


class DivergenceError(RuntimeError):
    """Training diverged: the loss or the weights are not finite."""


def _lr_text(runner) -> str:
    """The learning rate(s) of the current iteration, e.g. ``1e+06``."""
    try:
        lrs = runner.optim_wrapper.get_lr()
    except Exception:  # pragma: no cover (no optimizer built)
        return 'unknown'
    parts = []
    for name, values in lrs.items():
        text = ', '.join(f'{v:.4g}' for v in dict.fromkeys(values))
        parts.append(text if name == 'lr' else f'{name} {text}')
    return '; '.join(parts)


def _non_finite_tensors(tensors) -> list:
    return [
        name for name, t in tensors
        if torch.is_tensor(t) and t.is_floating_point()
        and not bool(torch.isfinite(t).all())
    ]


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Raise :class:`DivergenceError` when training diverges.

    The error names the iteration, the epoch, the learning rate and the last
    checkpoint, which was written before the divergence. The run stops:

    - after ``patience`` iterations in a row with a NaN or infinite loss
      (1 stops at the first; more tolerate the odd overflowing batch of
      mixed precision, whose step the loss scaler skips);
    - at the end of a training epoch whose model holds a non-finite
      parameter or buffer, before the epoch's checkpoint and validation;
    - before any checkpoint whose weights are not finite is written.

    So no NaN model is validated, chosen as best or saved. In distributed
    training the ranks decide together (the flag is all-reduced), so none is
    left waiting for the others. Priority 65: after ``LoggerHook`` (the
    diverging iteration is still logged), before ``ParamSchedulerHook`` (the
    learning rate reported is the one used) and ``CheckpointHook``.

    Turn it off with ``--cfg-options default_hooks.non_finite_loss.enabled=
    False`` (mmengine accepts None only for its own default hooks).

    Args:
        patience (int): Iterations in a row with a non-finite loss that stop
            the run. Defaults to 3.
        enabled (bool): False makes the hook do nothing. Defaults to True.
    """

    priority = 65

    def __init__(self, patience: int = 3, enabled: bool = True) -> None:
        if not isinstance(patience, int) or patience < 1:
            raise ValueError(
                f'NonFiniteLossHook: patience must be an int >= 1, got '
                f'{patience!r}')
        self.patience = patience
        self.enabled = enabled
        self._in_a_row = 0

    def _diverged(self, runner, what: str,
                  iteration: int) -> DivergenceError:
        """The error; ``iteration`` counts from 1, as in the log."""
        checkpoint_dir = getattr(runner, 'checkpoint_dir', None)
        try:
            latest = latest_checkpoint(
                runner.work_dir,
                checkpoint_dir=checkpoint_dir() if checkpoint_dir else None)
        except CheckpointError as problem:
            saved = ('no checkpoint written before the divergence is '
                     f'resumable as it is: {problem}')
        else:
            saved = ('no checkpoint was written before the divergence'
                     if latest is None else f'the last checkpoint, {latest}, '
                     'was written before the divergence')
        where = f'iteration {iteration}'
        if getattr(runner.train_loop, 'max_epochs', None) is not None:
            where += f' (epoch {runner.epoch + 1})'
        return DivergenceError(
            f'Training diverged: {what} at {where}, learning rate '
            f'{_lr_text(runner)}. The run was stopped before saving this '
            f'model; {saved}. Lower '
            'the learning rate (optim_wrapper.optimizer.lr) or clip the '
            'gradients (optim_wrapper.clip_grad); '
            'default_hooks.non_finite_loss.patience sets how many '
            'non-finite losses in a row stop the run.')

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        loss = (outputs or {}).get('loss')
        if loss is None or not self.enabled:
            return
        bad = torch.tensor(
            0. if bool(torch.isfinite(torch.as_tensor(loss)).all()) else 1.)
        if is_distributed():
            all_reduce(bad, op='max')
        if not bad.item():
            self._in_a_row = 0
            return
        self._in_a_row += 1
        if self._in_a_row >= self.patience:
            value = float(torch.as_tensor(loss).detach().float().sum())
            raise self._diverged(
                runner, f'the loss is {value} for {self._in_a_row} '
                'iteration(s) in a row', runner.iter + 1)

    def after_train_epoch(self, runner) -> None:
        if not self.enabled:
            return
        model = unwrap_model(runner.model)
        bad = _non_finite_tensors(
            list(model.named_parameters()) + list(model.named_buffers()))
        flag = torch.tensor(1. if bad else 0.)
        if is_distributed():
            all_reduce(flag, op='max')
        if flag.item():
            raise self._diverged(
                runner, 'the weights are not finite at the end of the epoch '
                f'({", ".join(bad[:3]) or "on another rank"})', runner.iter)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        if not self.enabled:
            return
        bad = _non_finite_tensors(checkpoint.get('state_dict', {}).items())
        if bad:
            raise self._diverged(
                runner, 'the weights to be saved are not finite '
                f'({", ".join(bad[:3])})',
                checkpoint.get('meta', {}).get('iter', runner.iter))
