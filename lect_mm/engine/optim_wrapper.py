"""Mixed-precision training on the CPU as well as on accelerators."""
import logging
from contextlib import contextmanager
from typing import Optional, Union

import torch
import torch.nn as nn
from mmengine.device import get_device
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmpretrain.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class DeviceAmpOptimWrapper(AmpOptimWrapper):
    """``AmpOptimWrapper`` that also runs on the CPU.

    mmengine's :class:`~mmengine.optim.AmpOptimWrapper` refuses to be built
    without CUDA/NPU/MLU/MUSA. This wrapper is what ``tools/train.py --amp``
    selects:

    - on an accelerator it *is* ``AmpOptimWrapper`` (float16 autocast by
      default, dynamic loss scaling, same state dict);
    - on the CPU it runs forward passes under
      ``torch.autocast('cpu', dtype=torch.bfloat16)``. bfloat16 has float32's
      exponent range, so no loss scaler is used (``loss_scaler`` is None)
      and backward/step are plain :class:`~mmengine.optim.OptimWrapper`'s.
      Building it says so once in the log.

    Args:
        loss_scale (float | str | dict): ``GradScaler`` setting, used on
            accelerators only. Defaults to ``'dynamic'``.
        dtype (str | torch.dtype, optional): Autocast dtype. On the CPU only
            ``'bfloat16'`` is valid. Defaults to None (float16 on CUDA,
            bfloat16 on the CPU).
        **kwargs: Other arguments of :class:`~mmengine.optim.OptimWrapper`
            (``optimizer``, ``clip_grad``, ``accumulative_counts``).
    """

    def __init__(self,
                 loss_scale: Union[str, float, dict] = 'dynamic',
                 dtype: Optional[Union[str, torch.dtype]] = None,
                 **kwargs):
        self.device_type = get_device()
        if self.device_type != 'cpu':
            super().__init__(loss_scale=loss_scale, dtype=dtype, **kwargs)
            return
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype, dtype)
        if dtype not in (None, torch.bfloat16):
            raise ValueError(
                f'DeviceAmpOptimWrapper: dtype={dtype!r} is not supported '
                "on the CPU, choose from [None, 'bfloat16']")
        OptimWrapper.__init__(self, **kwargs)
        self.loss_scaler = None
        self._scale_update_param = None
        self.cast_dtype = torch.bfloat16
        # Said once per run (one wrapper is built per run), since a user
        # asking for --amp may expect float16 and loss scaling.
        print_log(
            'AMP on the CPU: forward passes run under bfloat16 autocast, '
            f'without loss scaling (loss_scale={loss_scale!r} is not used: '
            "bfloat16 has float32's exponent range).",
            logger='current',
            level=logging.INFO)

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        if self.loss_scaler is None:
            OptimWrapper.backward(self, loss, **kwargs)
        else:
            super().backward(loss, **kwargs)

    def step(self, **kwargs) -> None:
        if self.loss_scaler is None:
            OptimWrapper.step(self, **kwargs)
        else:
            super().step(**kwargs)

    def state_dict(self) -> dict:
        if self.loss_scaler is None:
            return OptimWrapper.state_dict(self)
        return super().state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        if self.loss_scaler is None:
            # A checkpoint written on a GPU carries the scaler's state.
            state_dict = {
                k: v
                for k, v in state_dict.items() if k != 'loss_scaler'
            }
        super().load_state_dict(state_dict)

    @contextmanager
    def optim_context(self, model: nn.Module):
        if self.loss_scaler is not None:
            with super().optim_context(model):
                yield
            return
        with OptimWrapper.optim_context(self, model), torch.autocast(
                device_type='cpu', dtype=self.cast_dtype):
            yield
