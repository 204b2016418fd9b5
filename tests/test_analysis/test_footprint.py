"""training_footprint: exact saved bytes and op counts, pinned for LeCT."""
import pytest
import torch
import torch.nn as nn

from lect_mm.analysis import build_model, training_footprint


class Scale(nn.Module):
    """logits = x * w: autograd saves x for dw (the input needs no grad)."""

    def __init__(self, features):
        super().__init__()
        self.w = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return x * self.w


def test_counts_a_known_step():
    result = training_footprint(Scale(10), (10, ), batch_size=4)
    # x (4 x 10 float32) for mul; the log-probabilities (4 x 10 float32),
    # the labels (4 int64) and the total weight (a float32 scalar) for the
    # cross-entropy
    assert result['saved_bytes'] == 4 * 10 * 4 + 4 * 10 * 4 + 4 * 8 + 4
    assert result['saved_bytes_per_image'] == result['saved_bytes'] / 4
    assert result['ops_by_name']['mul'] >= 1
    assert result['ops'] > result['forward_ops'] > 0
    # gradients are not left behind
    assert all(p.grad is None for p in Scale(10).parameters())


class Transposed(Scale):
    """logits = (xᵀ * w[:, None])ᵀ: two views forward, more backward."""

    def forward(self, x):
        return (x.t() * self.w[:, None]).t()


ALIASING_OPS = {
    'alias', 'as_strided', 'detach', 'expand', 'permute', 'squeeze', 't',
    'transpose', 'unsqueeze', 'view', '_unsafe_view'
}


def test_counts_the_views_apart():
    result = training_footprint(Transposed(10), (10, ), batch_size=4)
    names = result['ops_by_name']
    # x.t() and the result's .t() in forward, the latter's backward t (x
    # needs no gradient), and the detach of w's gradient handed to .grad
    assert names['t'] == 3 and names['detach'] >= 1
    assert result['view_ops'] == sum(
        n for name, n in names.items() if name in ALIASING_OPS)
    assert 0 < result['view_ops'] < result['ops']
    plain = training_footprint(Scale(10), (10, ), batch_size=4)
    # the transposes (and w[:, None]) add views only
    assert result['view_ops'] - plain['view_ops'] == result['ops'] - plain[
        'ops'] > 0


def test_saved_bytes_grow_with_the_batch():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 10))
    one, two, four = (
        training_footprint(model, (16, ), batch_size=b) for b in (1, 2, 4))
    # activations grow linearly with the batch, weights are counted once
    per_image = two['saved_bytes'] - one['saved_bytes']
    assert per_image > 0
    assert four['saved_bytes'] - two['saved_bytes'] == 2 * per_image
    assert four['ops'] == one['ops']


# Saved bytes, ops and non-view ops at batch 1, 224x224, fp32, training mode
# (forward + backward of the classifier and a cross-entropy loss), as
# configured (with_cp=False) and with with_cp=True, where LeCT's blocks
# recompute their cheap chains in backward. They pin today's figures with a
# 2 % margin, so that a change that makes LeCT save more for backward or
# dispatch more ops (or turns views into copies) fails here; lower them when
# the footprint shrinks.
WITH_CP = {'model.backbone.with_cp': True}
PINNED = {
    ('configs/baselines/resnet_cifar10.py', False): (15_168_720, 339, 232),
    ('configs/lect/lect_v1_cifar10.py', False): (79_291_116, 1120, 607),
    ('configs/lect/lect_v1_cifar10.py', True): (37_243_604, 1335, 757),
    ('configs/lect/lect_v2_cifar10.py', False): (74_523_252, 1435, 771),
    ('configs/lect/lect_v2_cifar10.py', True): (36_217_876, 1757, 989),
    # v3's upsampler: its transposed convolution as a broadcast multiply-add
    # (a few ops more than one grouped ConvTranspose2d, which cuDNN ran as
    # one kernel per group)
    ('configs/lect/lect_v3_cifar10.py', False): (75_421_784, 1220, 632),
    ('configs/lect/lect_v3_cifar10.py', True): (37_494_032, 1470, 782),
}


@pytest.mark.parametrize('config,with_cp', sorted(PINNED))
def test_pinned_footprint(config, with_cp):
    torch.manual_seed(0)
    model = build_model(config, WITH_CP if with_cp else None)
    result = training_footprint(model, (3, 224, 224), 1)
    figures = (result['saved_bytes'], result['ops'],
               result['ops'] - result['view_ops'])
    for name, value, pin in zip(('saved bytes', 'ops', 'non-view ops'),
                                figures, PINNED[config, with_cp]):
        # within the margin either way: no regression, and no stale pin
        assert pin * 0.98 <= value <= pin * 1.02, (name, value, pin)
