"""A seed gives the same model as when docs/results was measured.

docs/results/fashion_mnist_cpu.md reports trainings of these configs at one
commit. A later change that reorders how a model draws its initial weights
(building submodules in another order, another init), or changes what it
computes, would make those runs irreproducible from the current code
without changing any other test. After ``torch.manual_seed(0)``, the
model's build and ``init_weights()`` (the runner's order under
``randomness.seed=0``), a fingerprint is compared with its pin:

- the random generator's state (mt19937's words), exactly: how many numbers
  the build drew is fixed by the code alone and mt19937 is the same on every
  machine, so this pin is bit-exact by construction;
- the initial weights (sum, sum of magnitudes, sum of squares, each an
  exactly rounded ``math.fsum``, so the order of a reduction cannot move
  them) within ``rel=1e-6``: the draws go through vectorised float kernels
  (``erfinv``, ``log``, ``cos``) that another CPU may round differently,
  by at most a few ulps (1e-7) per weight, while another seed or another
  init moves these sums by 1e-3 and more
  (``test_the_fingerprint_tells_another_seed_apart``);
- the eval-mode logits of a fixed input up to float32 rounding of other
  CPU kernels.
"""
import hashlib
import math
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmpretrain.registry import MODELS

import lect_mm  # noqa: F401

CONFIGS = Path(__file__).resolve().parents[2] / 'configs' / 'fashion_mnist'

#: the seed, position and 624 words of mt19937 in ``torch.get_rng_state()``;
#: the bytes after them cache a normal sample, a float computed by libm
MT19937_BYTES = 8 + 4 + 4 + 8 + 624 * 8

#: relative tolerance of the weight sums (see the module's docstring)
WEIGHTS_REL = 1e-6

#: config -> (digest of the generator's state after the build, sum of the
#: parameters, sum of their magnitudes, sum of their squares, sum of the
#: logits, sum of the squared logits) at seed 0.
PINNED = {
    'ceit_gap': ('76315432b8130f89', 6514.556043368846, 35561.91734805631,
                 8320.202918792793, -0.7355328351259232, 1.2974102712334763),
    'lect_v1': ('b7270ec2bfd7171c', 8756.749931497963, 42343.726159654456,
                11209.538118346218, -0.5975010097026825, 1.2320741117866616),
    'lect_v1_ablation': ('b7270ec2bfd7171c', 8756.749931497963,
                         42343.726159654456, 11209.538118346218,
                         -0.5986522287130356, 1.2366188163727434),
    'lect_v3': ('ee9d2c8e50ecca86', 8096.9487496451175, 43510.93859215239,
                11087.255991075477, 1.5669281519949436, 0.7337296532304838),
    'resnet': ('58ce9992983ef1fb', 1626.4902933272235, 20760.147028419506,
               2136.950146452311, -0.21835253899917006, 0.05219786584840142),
    'vit': ('d908a67f7571e13a', 2225.4547001912965, 78060.15968215931,
            6871.8877760061705, 1.6283956691622734, 10.312731294252785),
}


def fingerprint(model_name, seed=0):
    cfg = Config.fromfile(CONFIGS / f'{model_name}_fashion_mnist_cpu.py')
    torch.manual_seed(seed)
    model = MODELS.build(cfg.model)
    model.init_weights()
    state = hashlib.sha256(
        torch.get_rng_state().numpy()[:MT19937_BYTES].tobytes()
    ).hexdigest()[:16]
    # float64 magnitudes and squares of float32 weights are exact
    values = torch.cat([p.detach().double().flatten()
                        for p in model.parameters()])
    x = torch.linspace(-2, 2, 2 * 3 * 64 * 64).reshape(2, 3, 64, 64)
    with torch.no_grad():
        logits = model.eval()(x, mode='tensor').double()
    return (state, fsum(values), fsum(values.abs()), fsum(values.square()),
            logits.sum().item(), logits.square().sum().item())


def fsum(values):
    """``math.fsum`` of a float64 tensor's values, read through a
    memoryview: the floats of ``values.tolist()`` in the same order, without
    building a list of a million Python floats (a third of the time)."""
    return math.fsum(memoryview(values.contiguous().numpy()))


def matches(found, pinned):
    """Which parts of ``found`` agree with ``pinned``, by name."""
    state, total, magnitude, squares, logits, logits_sq = pinned
    # the signed sum cancels: its tolerance is relative to the magnitudes
    weights_sum = found[1] == pytest.approx(total,
                                            abs=WEIGHTS_REL * magnitude)
    weights_rest = found[2:4] == pytest.approx((magnitude, squares),
                                               rel=WEIGHTS_REL)
    return {
        'generator state': found[0] == state,
        'weights': weights_sum and weights_rest,
        'logits': found[4:] == pytest.approx((logits, logits_sq),
                                             rel=1e-4, abs=1e-5),
    }


@pytest.mark.parametrize('model_name', sorted(PINNED))
def test_seeded_model_is_unchanged(model_name):
    found = fingerprint(model_name)
    agree = matches(found, PINNED[model_name])
    assert all(agree.values()), (
        f'{model_name}: {[k for k, ok in agree.items() if not ok]} differ: '
        f'found {found}, pinned {PINNED[model_name]}')


def test_the_fingerprint_tells_another_seed_apart():
    # the tolerances leave room for rounding, never for other weights
    agree = matches(fingerprint('resnet', seed=1), PINNED['resnet'])
    assert not any(agree.values()), agree
