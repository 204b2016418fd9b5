"""Reference-layout LeCT weights -> lect_mm: key map and logit equivalence."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import lect_mm  # noqa: F401
from mmpretrain.apis import get_model

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / 'tests' / 'reference'))
from lect_reference import ReferenceLeCT, randomize_  # noqa: E402


def _load_tool():
    path = REPO / 'tools' / 'model_converters' / 'lect_ref2mmpretrain.py'
    spec = importlib.util.spec_from_file_location('lect_ref2mmpretrain',
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _load_tool()


def test_convert_lect_key_map():
    t = torch.zeros(1)
    deconv = torch.zeros(96, 1, 14, 14)
    src = {
        'patch_embed2.proj.weight': t,
        'blocks2.1.norm1.weight': t,
        'blocks2.1.leatt.conv1.1.running_var': t,
        'blocks2.1.leatt.v_upsample.1.weight': t,
        'blocks2.1.leatt.v_upsample.2.running_mean': t,
        'blocks2.1.leff.bn3.bias': t,
        'norm3.bias': t,
        'head.weight': t,
    }
    out = tool.convert_lect(src)
    assert tool.detect_variant(src) == 'v1'
    assert list(out) == [
        'backbone.stages.1.patch_embed.proj.weight',
        'backbone.stages.1.blocks.1.norm1.weight',
        'backbone.stages.1.blocks.1.attn.conv1.1.running_var',
        'backbone.stages.1.blocks.1.attn.query_upsampler.conv.weight',
        'backbone.stages.1.blocks.1.attn.query_upsampler.norm.running_mean',
        'backbone.stages.1.blocks.1.ffn.bn3.bias',
        'backbone.stages.2.norm.bias',
        'head.fc.weight',
    ]
    v3 = {'blocks1.0.leatt.v_upsample.0.weight': t,
          'blocks1.0.leatt.v_upsample.2.weight': deconv,
          'blocks1.0.leatt.v_upsample.4.weight': t}
    assert tool.detect_variant(v3) == 'v3'
    assert [k.split('attn.')[1] for k in tool.convert_lect(v3)] == [
        'query_upsampler.reduce.weight', 'query_upsampler.deconv.weight',
        'query_upsampler.expand.weight']
    v2 = {'blocks1.0.leatt.conv3.0.bias': t, 'blocks1.0.leatt.v_bn.bias': t,
          'blocks1.0.leatt.v_conv.weight': t}
    assert tool.detect_variant(v2) == 'v2'
    assert [k.split('attn.')[1] for k in tool.convert_lect(v2)] == [
        'conv3.0.bias', 'query_upsampler.norm.bias',
        'query_upsampler.conv.weight']
    with pytest.raises(ValueError, match=r"no mapping: \['blocks1.0.x.w'\]"):
        tool.convert_lect({'blocks1.0.x.w': t})
    with pytest.raises(ValueError, match='no mapping'):  # v2 key in v1
        tool.convert_lect({'blocks1.0.leatt.conv3.0.bias': t}, 'v1')


@pytest.mark.parametrize('variant', ['v1', 'v2', 'v3'])
def test_reference_weights_give_same_logits(variant, tmp_path):
    torch.manual_seed(0)
    ref = randomize_(ReferenceLeCT(variant), seed=1).eval()
    src, dst = tmp_path / 'ref.pth', tmp_path / 'lect.pth'
    wrapper = {'v1': 'model', 'v2': 'state_dict', 'v3': None}[variant]
    sd = ref.state_dict()
    torch.save(sd if wrapper is None else {wrapper: sd}, src)
    config = str(REPO / 'configs' / '_base_' / 'models' / f'lect_{variant}.py')

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


def test_missing_key_fails_clearly(tmp_path):
    sd = ReferenceLeCT('v1').state_dict()
    sd.pop('blocks2.1.leff.bn2.running_var')
    src = tmp_path / 'ref.pth'
    torch.save(sd, src)
    with pytest.raises(ValueError, match=r'missing keys \[\'backbone.stages'
                       r'.1.blocks.1.ffn.bn2.running_var\'\] \(1\)'):
        tool.main([str(src), str(tmp_path / 'out.pth')])
    assert not (tmp_path / 'out.pth').exists()
