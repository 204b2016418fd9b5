"""A seed gives the same model as when docs/results was measured.

docs/results/fashion_mnist_cpu.md reports trainings of these configs at one
commit. A later change that reorders how a model draws its initial weights
(building submodules in another order, another init), or changes what it
computes, would make those runs irreproducible from the current code
without changing any other test. The pins are the float64 sums of the
initial weights and of the eval-mode logits of a fixed input, after
``torch.manual_seed(0)``, the model's build and ``init_weights()``: the
runner's order under ``randomness.seed=0``.
"""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401

CONFIGS = Path(__file__).resolve().parents[2] / 'configs' / 'fashion_mnist'

#: config -> (sum of the parameters, sum of their squares, sum of the
#: logits, sum of the squared logits) at seed 0.
PINNED = {
    'ceit_gap': (
        6514.556043298563, 8320.202918800256, -0.7355328351259232,
        1.2974102712334763),
    'lect_v1': (
        8756.749931466526, 11209.538118348584, -0.5975010097026825,
        1.2320741117866616),
    'lect_v1_ablation': (
        8756.749931466526, 11209.538118348584, -0.5986522287130356,
        1.2366188163727434),
    'lect_v3': (
        8096.948749623241, 11087.255991078568, 1.5669281519949436,
        0.7337296532304838),
    'resnet': (
        1626.4902933272235, 2136.950146452311, -0.21835253899917006,
        0.05219786584840142),
    'vit': (
        2225.454700187105, 6871.887776006521, 1.6283956691622734,
        10.312731294252785),
}


def fingerprint(model_name):
    cfg = Config.fromfile(CONFIGS / f'{model_name}_fashion_mnist_cpu.py')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    params = torch.cat(
        [p.detach().double().flatten() for p in model.parameters()])
    x = torch.linspace(-2, 2, 2 * 3 * 64 * 64).reshape(2, 3, 64, 64)
    with torch.no_grad():
        logits = model.eval()(x, mode='tensor').double()
    return (params.sum().item(), params.square().sum().item(),
            logits.sum().item(), logits.square().sum().item())


@pytest.mark.parametrize('model_name', sorted(PINNED))
def test_seeded_model_is_unchanged(model_name):
    found, pinned = fingerprint(model_name), PINNED[model_name]
    # the initial weights exactly (the generator is the same on every
    # machine); the logits up to float32 rounding of other CPU kernels
    assert found[:2] == pytest.approx(pinned[:2], rel=1e-12)
    assert found[2:] == pytest.approx(pinned[2:], rel=1e-4, abs=1e-5)
