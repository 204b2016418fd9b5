"""The backbones' argument helpers (lect_mm.models.utils) and their base
(ZooBackbone)."""
import pytest
import torch
import torch.nn as nn

from lect_mm.models.backbones.base_backbone import ZooBackbone
from lect_mm.models.utils import (check_frozen_stages, check_per_stage, freeze,
                                  is_pretrained, parse_arch, parse_out_indices,
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


class _Net(ZooBackbone):
    """A stem and three one-conv stages."""

    def __init__(self, **kwargs):
        super().__init__(3, **kwargs)
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4))
        self.layers = nn.Sequential(
            *[nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))
              for _ in range(3)])
        self._freeze_stages()

    def stem_and_stages(self):
        return ['stem'], [[f'layers.{i}'] for i in range(3)]

    def forward(self, x):
        return tuple(x)


@pytest.mark.parametrize('norm_eval', [False, True])
def test_zoo_backbone_freezes_and_keeps_norms_in_eval(norm_eval):
    net = _Net(frozen_stages=1, norm_eval=norm_eval)
    assert net.out_indices == (2, ) and net.with_cp is False
    assert net.train() is net
    assert net.training and not net.stem.training
    assert not net.layers[0].training and net.layers[1][0].training
    assert net.layers[1][1].training is not norm_eval
    assert not any(p.requires_grad for p in net.layers[0].parameters())
    net.eval()
    assert not any(m.training for m in net.modules())
    names = ('stem.0.weight', 'layers.0.1.bias', 'layers.2.0.weight', 'x')
    assert [net.get_layer_depth(n) for n in names] == [(0, 5), (1, 5),
                                                       (3, 5), (4, 5)]
    with pytest.raises(ValueError, match='Invalid out_indices 3 for 3 '
                       'stages'):
        _Net(out_indices=3)


def test_drop_path_rates_rise_over_all_blocks():
    rates = ZooBackbone.drop_path_rates(0.3, (1, 0, 3))
    assert rates[1] == [] and len(rates[0]) == 1 and len(rates[2]) == 3
    assert sum(rates, []) == pytest.approx([0., .1, .2, .3])


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
