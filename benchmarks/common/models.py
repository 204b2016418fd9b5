"""The report's models: configs, classifiers built from them, and the
report's training step."""
import contextlib
import functools
import os.path as osp
from typing import Callable, Dict, Optional

import torch

from . import REPO_ROOT

# The models of the report's Table 2, CIFAR-10 configs.
MODEL_CONFIGS: Dict[str, str] = {
    'LeCT': 'configs/lect/lect_v1_cifar10.py',
    'LeCT v2': 'configs/lect/lect_v2_cifar10.py',
    'LeCT v3': 'configs/lect/lect_v3_cifar10.py',
    'CeiT (GAP)': 'configs/baselines/ceit_gap_cifar10.py',
    'AlterNet': 'configs/baselines/alternet_cifar10.py',
    'ResNet': 'configs/baselines/resnet_cifar10.py',
    'ConvNeXt': 'configs/baselines/convnext_cifar10.py',
    'ViT': 'configs/baselines/vit_cifar10.py',
}
REFERENCE_MODEL = 'ResNet'
QUICK_MODELS = ('LeCT', 'ResNet')


def load_config(config: str, cfg_options: Optional[dict] = None):
    """``Config.fromfile`` of a repo-relative or absolute path."""
    from mmengine.config import Config

    path = config if osp.isabs(config) else osp.join(REPO_ROOT, config)
    if not osp.isfile(path):
        raise FileNotFoundError(f'config {config} not found (looked at '
                                f'{path})')
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def build_classifier(config, cfg_options: Optional[dict] = None):
    """Build and initialise the model of a config (CPU, train mode).

    Only ``cfg.model`` is used: unless it names one, the model gets
    mmpretrain's default data preprocessor (no normalisation), which is what
    synthetic-input benchmarks want; the config's top-level
    ``data_preprocessor`` (which the runner would merge in) is ignored.

    Args:
        config (str | Config): Config path or a loaded config.
        cfg_options (dict, optional): ``merge_from_dict`` overrides.

    Returns:
        nn.Module: The classifier.
    """
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS

    import lect_mm  # noqa: F401  (registers the library)
    from lect_mm.analysis import init_weights_quietly

    init_default_scope('mmpretrain')
    cfg = load_config(config, cfg_options) if isinstance(config,
                                                         str) else config
    return init_weights_quietly(MODELS.build(cfg.model))


#: ``torch.compile``'s modes ('default': the call without ``mode``)
COMPILE_MODES = ('default', 'reduce-overhead', 'max-autotune',
                 'max-autotune-no-cudagraphs')


def compile_model(model: torch.nn.Module,
                  mode: Optional[str] = None) -> torch.nn.Module:
    """``torch.compile`` the backbone and neck in place (the heavy parts),
    as ``compile=True`` in a config does (``CompileModelHook``; a config
    names the mode as ``compile=dict(mode=...)``), in ``mode`` (one of
    :data:`COMPILE_MODES`; ``None``: the default).

    The classifier's ``loss``/``predict`` logic (data samples, label
    concatenation) stays eager, so nothing breaks the compiled graphs.
    """
    from lect_mm.engine.hooks import compile_submodules

    compile_submodules(model, **({} if mode in (None, 'default') else
                                 dict(mode=mode)))
    return model


def autocast(device: torch.device, enabled: bool):
    """bf16 autocast on CUDA or CPU, or a no-op context."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def _infer(model: torch.nn.Module, inputs: torch.Tensor,
           device: torch.device, bf16: bool) -> torch.Tensor:
    with torch.inference_mode(), autocast(device, bf16):
        return model(inputs, mode='tensor')


def inference_call(model: torch.nn.Module, inputs: torch.Tensor,
                   device: torch.device,
                   bf16: bool = False) -> Callable[[], torch.Tensor]:
    """``model(inputs, mode='tensor')`` under ``torch.inference_mode`` (and
    bf16 autocast), as a callable to time."""
    return functools.partial(_infer, model, inputs, device, bf16)


def synthetic_samples(batch_size: int, num_classes: int,
                      device: torch.device) -> list:
    """Data samples with labels ``i % num_classes``, already on ``device``."""
    from mmpretrain.structures import DataSample

    return [
        DataSample().set_gt_label(i % num_classes).to(device)
        for i in range(batch_size)
    ]


def num_classes_of(model: torch.nn.Module) -> int:
    return int(getattr(model.head, 'num_classes', 10))


def build_report_optim_wrapper(model: torch.nn.Module,
                               device: torch.device,
                               amp: bool = False,
                               max_norm: float = 5.0):
    """mmengine's optim wrapper with the report's settings (its Appendix).

    ``build_optim_wrapper`` of AdamW (lr 1e-3, weight decay 0.05) with
    ``clip_grad=dict(max_norm=5)``; with ``amp`` lect_mm's
    ``DeviceAmpOptimWrapper`` with ``dtype='bfloat16'``.
    """
    from mmengine.optim import build_optim_wrapper

    cfg = dict(
        type='OptimWrapper',
        optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
        clip_grad=dict(max_norm=max_norm))
    if amp:
        cfg.update(type='DeviceAmpOptimWrapper', dtype='bfloat16')
    # DeviceAmpOptimWrapper picks CPU or CUDA from mmengine's get_device,
    # i.e. the current CUDA device: make that the named one ('cuda:1');
    # plain 'cuda' is the current one already (set_device refuses it)
    if device.type == 'cuda' and device.index is not None:
        torch.cuda.set_device(device)
    return build_optim_wrapper(model, cfg)


class TrainStep:
    """One training iteration as mmengine's runner runs it (report Appendix).

    The body of ``BaseModel.train_step`` after the data preprocessor:
    forward + loss under ``optim_wrapper.optim_context``, ``parse_losses``,
    then ``optim_wrapper.update_params`` (backward, gradient-norm clip,
    AdamW step, zero grad, and the grad-norm logging to the message hub).
    The optim wrapper is built by mmengine's ``build_optim_wrapper`` from the
    configs' settings: AdamW lr 1e-3, weight decay 0.05, ``clip_grad=dict(
    max_norm=5)``; with ``amp`` it is lect_mm's ``DeviceAmpOptimWrapper``
    with ``dtype='bfloat16'`` (what ``tools/train.py --amp --cfg-options
    optim_wrapper.dtype=bfloat16`` trains with: bf16 autocast, and on CUDA
    mmengine's dynamic loss scaler as well).

    Args:
        model (nn.Module): A classifier in train mode on its device.
        device (torch.device): Where the model lives.
        amp (bool): bf16 mixed precision. Defaults to False.
        channels_last (bool): Convert the inputs to channels-last memory
            format (the model should be converted too). Defaults to False.
        max_norm (float): Clip threshold. Defaults to 5.
    """

    def __init__(self,
                 model: torch.nn.Module,
                 device: torch.device,
                 amp: bool = False,
                 channels_last: bool = False,
                 max_norm: float = 5.0) -> None:
        self.model = model
        self.device = device
        self.channels_last = channels_last
        self.optim_wrapper = build_report_optim_wrapper(
            model, device, amp, max_norm)

    def __call__(self, inputs: torch.Tensor, data_samples: list):
        if self.channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        with self.optim_wrapper.optim_context(self.model):
            losses = self.model(inputs, data_samples, mode='loss')
        loss, _ = self.model.parse_losses(losses)
        self.optim_wrapper.update_params(loss)
        return loss.detach()
