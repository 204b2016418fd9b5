"""Helpers shared by the backbones (lect_mm.models.utils)."""
import pytest
import torch
import torch.nn as nn

from lect_mm.models.utils import (FreezeNormEvalMixin, check_frozen_stages,
                                  check_per_stage, freeze, freeze_stages,
                                  is_pretrained, linear_drop_path_rates,
                                  parse_arch, parse_out_indices,
                                  parse_pooled_out)


def test_parse_out_indices():
    assert parse_out_indices(-1, 4) == [3]
    assert parse_out_indices((3, 0, -4, 1), 4) == [0, 1, 3]
    with pytest.raises(ValueError, match='Invalid out_indices 4 for 4 layers'):
        parse_out_indices([4], 4)
    with pytest.raises(ValueError,
                       match='Invalid out_indices -3 for 2 blocks'):
        parse_out_indices(-3, 2, 'blocks')
    with pytest.raises(TypeError, match='an int or a sequence'):
        parse_out_indices(1.0, 4)


class _Net(FreezeNormEvalMixin, nn.Module):

    def __init__(self, norm_eval):
        super().__init__()
        self._init_freezing(-1, 1, norm_eval)
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4))
        self.head = nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))

    def _freeze_stages(self):
        self.stem.eval()


@pytest.mark.parametrize('norm_eval', [False, True])
def test_freeze_norm_eval_mixin(norm_eval):
    net = _Net(norm_eval)
    assert net.train() is net
    assert net.training and not net.stem.training
    assert net.head[0].training
    assert net.head[1].training is not norm_eval
    net.eval()
    assert not any(m.training for m in net.modules())


def test_parse_arch_copies_and_checks():
    zoo = {'a': dict(depths=[1, 2], nested=dict(x=1))}
    got = parse_arch('a', zoo, ['depths'])
    got['nested']['x'] = 2
    assert zoo['a']['nested']['x'] == 1  # a deep copy: the zoo is untouched
    assert parse_arch(dict(depths=[3]), zoo, ['depths']) == dict(depths=[3])
    with pytest.raises(ValueError, match=r"Unavailable arch 'b', choose "
                       r"from \['a'\]"):
        parse_arch('b', zoo, ['depths'])
    with pytest.raises(ValueError, match=r"missing \['widths'\]"):
        parse_arch(dict(depths=[3]), zoo, ['depths', 'widths'])
    with pytest.raises(TypeError, match='arch must be a str or a dict'):
        parse_arch(3, zoo, ['depths'])
    # Per-stage keys: those present must match the first present one.
    arch = dict(depths=[1, 2], widths=[8, 16])
    assert parse_arch(arch, zoo, ['depths'], ['extra', 'depths', 'widths'])
    with pytest.raises(ValueError, match=r"arch\['widths'\] has length 1, "
                       r"but arch\['depths'\] has 2: per-stage settings"):
        parse_arch(dict(arch, widths=[8]), zoo, ['depths'],
                   ['depths', 'widths'])


def test_check_per_stage():
    assert check_per_stage({'a': [1, 2], 'b': (3, 4)}) == 2
    assert check_per_stage({'strides': (1, 2)}, 2) == 2
    with pytest.raises(ValueError, match='strides has length 1, but there '
                       'are 2 stages'):
        check_per_stage({'strides': (1, )}, 2)
    with pytest.raises(TypeError, match='a must be a list with one entry'):
        check_per_stage({'a': 3})


def test_freeze_stages_rule():
    stem, stages = nn.Linear(1, 1), [nn.Linear(1, 1) for _ in range(3)]

    def frozen(k):
        for m in [stem, *stages]:
            m.requires_grad_(True)
        freeze_stages(k, [stem], [[m] for m in stages])
        return [not m.weight.requires_grad for m in [stem, *stages]]

    assert frozen(-1) == [False] * 4
    assert frozen(0) == [True, False, False, False]
    assert frozen(2) == [True, True, True, False]
    assert frozen(3) == [True] * 4


def test_is_pretrained():
    ckpt = dict(type='Pretrained', checkpoint='x.pth')
    assert is_pretrained(ckpt)
    assert is_pretrained([dict(type='TruncNormal', layer='Linear'), ckpt])
    assert not is_pretrained(None)
    assert not is_pretrained([dict(type='Constant', layer='LayerNorm')])


def test_parse_pooled_out():
    types = ('pooled', 'featmap')
    assert parse_pooled_out('pooled', types, -1, 4) == [3]
    assert parse_pooled_out('featmap', types, (0, -1), 4, 'blocks') == [0, 3]
    with pytest.raises(ValueError, match=r"Unsupported out_type 'cls'; "
                       r"choose from \['pooled', 'featmap'\]"):
        parse_pooled_out('cls', types, -1, 4)
    with pytest.raises(ValueError, match='exists only after the last block '
                       r'\(out_indices=-1\); got \(0,\).*intermediate '
                       'blocks'):
        parse_pooled_out('pooled', types, (0, ), 4, 'blocks')


def test_linear_drop_path_rates():
    assert linear_drop_path_rates(0.3, 4) == pytest.approx([0., .1, .2, .3])
    assert linear_drop_path_rates(0.1, 1) == [0.]


def test_check_frozen_stages():
    assert check_frozen_stages(-1, 4) == -1
    assert check_frozen_stages(4, 4) == 4
    for bad in (5, -2, 1.0, '1', None):
        with pytest.raises(ValueError,
                           match=r'frozen_stages must be in \[-1, 4\] \(an '
                           r'int; -1 freezes nothing\), got '):
            check_frozen_stages(bad, 4)


def test_freeze_modules_parameters_and_none():
    stage = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4))
    token = nn.Parameter(torch.zeros(1, 4))
    other = nn.Linear(4, 4)
    freeze(stage, token, None)
    assert not stage.training and not stage[1].training
    assert not any(p.requires_grad for p in stage.parameters())
    assert not token.requires_grad
    assert other.training and other.weight.requires_grad
