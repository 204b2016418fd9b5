"""tools/model_converters/lect_ref2mmpretrain.py: reference-layout LeCT
weights -> an mmpretrain checkpoint with the same logits.

The key map itself is tested in tests/test_models/test_convert.py.
"""
from pathlib import Path

import pytest
import torch
from mmpretrain.apis import get_model

from lect_mm.engine import CheckpointMismatchError

import lect_mm  # noqa: F401

MODELS = Path(__file__).resolve().parents[2] / 'configs' / '_base_' / 'models'


@pytest.fixture(scope='module')
def tool(load_script):
    return load_script('tools/model_converters/lect_ref2mmpretrain.py')


@pytest.mark.parametrize('variant', ['v1', 'v2', 'v3'])
def test_reference_weights_give_same_logits(variant, tool, lect_reference,
                                            tmp_path):
    torch.manual_seed(0)
    ref = lect_reference.randomize_(
        lect_reference.ReferenceLeCT(variant), seed=1).eval()
    src, dst = tmp_path / 'ref.pth', tmp_path / 'lect.pth'
    wrapper = {'v1': 'model', 'v2': 'state_dict', 'v3': None}[variant]
    sd = ref.state_dict()
    torch.save(sd if wrapper is None else {wrapper: sd}, src)
    config = str(MODELS / f'lect_{variant}.py')

    tool.main([str(src), str(dst), '--config', config])

    ckpt = torch.load(dst, map_location='cpu', weights_only=True)
    assert ckpt['meta']['variant'] == variant
    model = get_model(config, pretrained=str(dst)).eval()
    model.load_state_dict(ckpt['state_dict'], strict=True)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected, got = ref(x), model(x, mode='tensor')
    assert (expected - got).abs().max().item() <= 1e-4
    assert expected.std().item() > 0.1  # a live signal, not all zeros


def test_missing_key_fails_clearly(tool, lect_reference, tmp_path, capsys):
    sd = lect_reference.ReferenceLeCT('v1').state_dict()
    sd.pop('blocks2.1.leff.bn2.running_var')
    src = tmp_path / 'ref.pth'
    torch.save(sd, src)
    with pytest.raises(CheckpointMismatchError,
                       match=r'1 missing key\(s\) in the checkpoint '
                       r'\(backbone.stages.1.blocks.1.ffn.bn2.running_var\)'):
        tool.main([str(src), str(tmp_path / 'out.pth')])
    assert not (tmp_path / 'out.pth').exists()
    # Without --config the model is built from the detected variant.
    sd = lect_reference.ReferenceLeCT('v2', num_classes=7).state_dict()
    torch.save(sd, src)
    tool.main([str(src), str(tmp_path / 'out.pth')])
    assert 'Converted LeCT v2 (' in capsys.readouterr().out
    meta = torch.load(tmp_path / 'out.pth', weights_only=True)['meta']
    assert meta['variant'] == 'v2' and meta['num_classes'] == 7
