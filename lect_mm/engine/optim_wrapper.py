"""Mixed-precision training on the CPU as well as on accelerators."""
from typing import Optional, Union

import torch
from mmengine.device import get_device
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmpretrain.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class DeviceAmpOptimWrapper(AmpOptimWrapper):
    """``AmpOptimWrapper`` (same arguments; ``tools/train.py --amp``) that
    also runs on the CPU, where mmengine's refuses to be built: bfloat16
    autocast (float32's exponent range), so no loss scaler (``loss_scaler``
    is None, ``loss_scale`` unused), and a log line says so."""

    def __init__(self,
                 loss_scale: Union[str, float, dict] = 'dynamic',
                 dtype: Optional[Union[str, torch.dtype]] = None,
                 **kwargs):
        if get_device() != 'cpu':
            return super().__init__(loss_scale=loss_scale, dtype=dtype,
                                    **kwargs)
        if dtype not in (None, 'bfloat16', torch.bfloat16):
            raise ValueError(
                f'DeviceAmpOptimWrapper: dtype={dtype!r} is not supported '
                "on the CPU, choose from [None, 'bfloat16']")
        OptimWrapper.__init__(self, **kwargs)
        self.loss_scaler = None
        self.cast_dtype = torch.bfloat16
        print_log(
            'AMP on the CPU: forward passes run under bfloat16 autocast, '
            f'without loss scaling (loss_scale={loss_scale!r} is not used: '
            "bfloat16 has float32's exponent range).", logger='current')

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        owner = OptimWrapper if self.loss_scaler is None else AmpOptimWrapper
        owner.backward(self, loss, **kwargs)

    def step(self, **kwargs) -> None:
        owner = OptimWrapper if self.loss_scaler is None else AmpOptimWrapper
        owner.step(self, **kwargs)

    def state_dict(self) -> dict:
        owner = OptimWrapper if self.loss_scaler is None else AmpOptimWrapper
        return owner.state_dict(self)

    def load_state_dict(self, state_dict: dict) -> None:
        if self.loss_scaler is None:  # a GPU's checkpoint has the scaler's
            state_dict = {k: v for k, v in state_dict.items()
                          if k != 'loss_scaler'}
        super().load_state_dict(state_dict)
