"""Stop a diverging run (``NonFiniteLossHook``) before it saves or scores a
model with NaN or infinite weights: mmengine trains on through a NaN loss,
ends with status 0 and may save the NaN model as the best checkpoint."""
from typing import Optional

import torch
from mmengine.dist import all_reduce
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS

from .loading import unwrap_model
from .runner import last_checkpoint_note


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
            f'model; {last_checkpoint_note(runner)}. Lower the learning rate '
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
