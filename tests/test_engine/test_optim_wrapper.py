"""DeviceAmpOptimWrapper: bfloat16 autocast on the CPU, AmpOptimWrapper on
CUDA."""
import pytest
import torch
import torch.nn as nn
from mmengine.optim import AmpOptimWrapper
from mmpretrain.registry import OPTIM_WRAPPERS

import lect_mm  # noqa: F401

cpu_only = pytest.mark.skipif(
    torch.cuda.is_available(), reason='tests the CPU path')


def _build(model, **kwargs):
    return OPTIM_WRAPPERS.build(
        dict(
            type='DeviceAmpOptimWrapper',
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            **kwargs))


@cpu_only
def test_cpu_forward_runs_under_bf16_autocast():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    wrapper = _build(model, loss_scale='dynamic', clip_grad=dict(max_norm=1))
    assert wrapper.loss_scaler is None
    x = torch.randn(2, 4)
    with wrapper.optim_context(model):
        assert torch.is_autocast_enabled('cpu')
        assert torch.get_autocast_dtype('cpu') == torch.bfloat16
        out = model(x)
    assert out.dtype == torch.bfloat16
    before = model.weight.detach().clone()
    wrapper.update_params(out.float().pow(2).mean())
    assert not torch.equal(before, model.weight)
    assert model.weight.dtype == torch.float32
    assert not torch.is_autocast_enabled('cpu')


@cpu_only
def test_cpu_state_dict_round_trip_and_gpu_checkpoint():
    model = nn.Linear(4, 3)
    wrapper = _build(model)
    state = wrapper.state_dict()
    assert 'loss_scaler' not in state
    # A state dict written with a GradScaler (on a GPU) loads on the CPU.
    state['loss_scaler'] = {'scale': 65536.0, '_growth_tracker': 0}
    _build(model).load_state_dict(state)
    assert 'loss_scaler' in state


@cpu_only
def test_cpu_rejects_float16():
    with pytest.raises(ValueError, match="dtype=.*float16.*bfloat16"):
        _build(nn.Linear(2, 2), dtype='float16')


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_behaves_as_amp_optim_wrapper():
    model = nn.Linear(4, 3).cuda()
    wrapper = _build(model)
    assert isinstance(wrapper, AmpOptimWrapper)
    assert wrapper.loss_scaler is not None
    with wrapper.optim_context(model):
        out = model(torch.randn(2, 4, device='cuda'))
    assert out.dtype == torch.float16
    wrapper.update_params(out.float().pow(2).mean())
    assert 'loss_scaler' in wrapper.state_dict()


@cpu_only
def test_cpu_says_once_that_it_runs_bf16_without_loss_scaling():
    import logging

    from mmengine.logging import MMLogger

    logger = MMLogger.get_instance('test_amp_cpu_message')
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        _build(nn.Linear(2, 2))
    finally:
        logger.removeHandler(handler)
    messages = [r.getMessage() for r in records]
    amp = [m for m in messages if 'bfloat16 autocast' in m]
    assert len(amp) == 1, messages
    assert 'without loss scaling' in amp[0]
