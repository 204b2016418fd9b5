"""lect_mm.models.convert: the reference-layout LeCT key map."""
from collections import OrderedDict

import pytest
import torch
import torch.nn as nn

from lect_mm.models.convert import (convert_attention_key, convert_lect_ref,
                                    detect_variant,
                                    reference_state_dict)

T = torch.zeros(1)


def test_v1_keys_of_every_part():
    src = {
        'patch_embed2.proj.weight': T,
        'blocks2.1.norm1.weight': T,
        'blocks2.1.leatt.conv1.1.running_var': T,
        'blocks2.1.leatt.v_upsample.1.weight': T,
        'blocks2.1.leatt.v_upsample.2.running_mean': T,
        'blocks2.1.leff.bn3.bias': T,
        'norm3.bias': T,
        'head.weight': T,
    }
    assert detect_variant(src) == 'v1'
    out = convert_lect_ref(src)
    assert isinstance(out, OrderedDict)
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
    assert all(value is T for value in out.values())  # no copies


def test_v2_and_v3_are_detected_and_mapped():
    deconv = torch.zeros(96, 1, 14, 14)
    v3 = {'blocks1.0.leatt.v_upsample.0.weight': T,
          'blocks1.0.leatt.v_upsample.2.weight': deconv,
          'blocks1.0.leatt.v_upsample.4.weight': T}
    assert detect_variant(v3) == 'v3'
    assert [k.split('attn.')[1] for k in convert_lect_ref(v3)] == [
        'query_upsampler.reduce.weight', 'query_upsampler.deconv.weight',
        'query_upsampler.expand.weight']
    v2 = {'blocks1.0.leatt.conv3.0.bias': T, 'blocks1.0.leatt.v_bn.bias': T,
          'blocks1.0.leatt.v_conv.weight': T}
    assert detect_variant(v2) == 'v2'
    assert [k.split('attn.')[1] for k in convert_lect_ref(v2)] == [
        'conv3.0.bias', 'query_upsampler.norm.bias',
        'query_upsampler.conv.weight']
    # v1's BN of the query upsampler sits where v3 has its ConvTranspose.
    assert detect_variant({'blocks1.0.leatt.v_upsample.2.weight': T}) == 'v1'


@pytest.mark.parametrize('variant, key, expected', [
    ('v1', 'proj_v.weight', 'proj_v.weight'),
    ('v1', 'v_upsample.2.bias', 'query_upsampler.norm.bias'),
    ('v3', 'v_upsample.2.bias', 'query_upsampler.deconv.bias'),
    ('v2', 'v_bn.running_var', 'query_upsampler.norm.running_var'),
    ('v2', 'conv3.1.weight', 'conv3.1.weight'),
    ('v1', 'conv3.1.weight', None),  # v1 and v3 have no third conv
    ('v3', 'v_conv.weight', None),
    ('v1', 'qkv.weight', None),
])
def test_attention_key(variant, key, expected):
    assert convert_attention_key(key, variant) == expected


def test_unmapped_keys_and_unknown_variant_fail():
    with pytest.raises(ValueError, match=r"no mapping: \['blocks1.0.x.w'\]"):
        convert_lect_ref({'blocks1.0.x.w': T})
    with pytest.raises(ValueError, match='1 key.*LeCT v1.*no mapping'):
        convert_lect_ref({'blocks1.0.leatt.conv3.0.bias': T}, 'v1')
    with pytest.raises(ValueError, match=r"'v4'.*\['v1', 'v2', 'v3'\]"):
        convert_lect_ref({'head.weight': T}, 'v4')
    with pytest.raises(ValueError, match="'v0'"):
        convert_attention_key('proj.weight', 'v0')


def test_reference_state_dict_unwraps():
    sd = {'head.weight': T}
    assert reference_state_dict(sd) is sd
    assert reference_state_dict({'state_dict': sd, 'meta': {}}) is sd
    assert reference_state_dict({'model': sd, 'epoch': 3}) is sd


def test_converted_weights_load_through_the_one_strict_loader():
    from lect_mm.engine import CheckpointMismatchError
    from lect_mm.engine.loading import load_state_dict_checked
    model = nn.Sequential(nn.Linear(2, 3))
    sd = model.state_dict()
    with pytest.raises(CheckpointMismatchError,
                       match=r"1 missing key\(s\) in the checkpoint "
                       r"\(0.bias\); 1 unexpected key\(s\) \(0.w\)"):
        load_state_dict_checked(
            model, {'0.weight': sd['0.weight'], '0.w': T}, 'Converted',
            strict=True, opt_out='')
    new = {k: torch.ones_like(v) for k, v in sd.items()}
    load_state_dict_checked(model, new, 'Converted', strict=True, opt_out='')
    assert torch.equal(model[0].weight, torch.ones(3, 2))
