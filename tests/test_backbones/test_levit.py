"""FlexibleLeViT: mmpretrain's LeViT with working custom archs."""
import pytest
import torch
from mmpretrain.models.backbones import LeViT

from lect_mm.models.backbones import FlexibleLeViT

SMALL = dict(embed_dims=[32, 64], num_heads=[2, 2], depths=[1, 1],
             key_dims=[16, 16])


def test_mmpretrain_levit_rejects_every_dict():
    """The upstream bug this subclass exists for (mmpretrain 1.2.0)."""
    with pytest.raises((AssertionError, KeyError)):
        LeViT(arch=SMALL)
    with pytest.raises((AssertionError, KeyError)):
        LeViT(arch=dict(embed_dim=[32, 64], num_heads=[2, 2], depth=[1, 1],
                        key_dim=[16, 16]))


def test_arch_errors():
    with pytest.raises(ValueError, match="Unavailable arch 'tiny'"):
        FlexibleLeViT(arch='tiny')
    with pytest.raises(ValueError, match=r"missing \['key_dims'\]"):
        FlexibleLeViT(arch={k: v for k, v in SMALL.items() if k != 'key_dims'})
    with pytest.raises(ValueError, match=r"arch\['depths'\] has length 1"):
        FlexibleLeViT(arch=dict(SMALL, depths=[1]))


def test_custom_dict_and_shapes():
    model = FlexibleLeViT(arch=SMALL, img_size=64, out_indices=(0, 1))
    assert 'custom' not in FlexibleLeViT.arch_zoo  # no class-level leak
    outs = model(torch.randn(2, 3, 64, 64))
    assert [o.shape for o in outs] == [(2, 32, 4, 4), (2, 64, 2, 2)]


def test_builtin_archs_equal_mmpretrain():
    ours = FlexibleLeViT(arch='128s')
    ref = LeViT(arch='128s')
    assert set(ours.state_dict()) == set(ref.state_dict())
    ours.load_state_dict(ref.state_dict())


def test_64s_is_128s_halved():
    arch = FlexibleLeViT.arch_zoo['64s']
    ref = LeViT.arch_zoo['128s']
    assert arch['embed_dims'] == [d // 2 for d in ref['embed_dims']]
    assert arch['num_heads'] == [h // 2 for h in ref['num_heads']]
    assert arch['depths'] == ref['depths']
    assert arch['key_dims'] == ref['key_dims']


def test_zero_init_residual():
    model = FlexibleLeViT(arch=SMALL, img_size=64)
    norms = list(model.residual_output_norms())
    # per stage: depth x (attention + MLP), plus the MLP after subsampling
    assert len(norms) == 2 + 3
    assert all((bn.weight == 1).all() for bn in norms)
    model.init_weights()
    assert all((bn.weight == 0).all() for bn in norms)
    qkv_bn = model.stages[0][0].block.qkv.bn
    assert (qkv_bn.weight == 1).all()  # only the branch outputs
    model.eval()
    x = model.patch_embed(torch.randn(1, 3, 64, 64)).flatten(2).transpose(
        1, 2)
    block = model.stages[0][0]
    torch.testing.assert_close(block(x), x)  # residual starts as identity

    kept = FlexibleLeViT(arch=SMALL, img_size=64, zero_init_residual=False)
    kept.init_weights()
    assert all((bn.weight == 1).all() for bn in kept.residual_output_norms())


def test_eval_attention_bias_cache_follows_to_and_load():
    """mmpretrain's LeViT attention caches its biases (``ab``) when set to
    eval; a later ``.to(dtype)`` or ``load_state_dict`` refreshes it."""
    torch.manual_seed(0)
    model = FlexibleLeViT(arch=SMALL, img_size=64).eval()
    x = torch.randn(1, 3, 64, 64)
    model.to(torch.float64)
    caches = [m.ab for m in model.modules() if hasattr(m, 'ab')]
    assert caches and all(ab.dtype == torch.float64 for ab in caches)
    model.to(torch.float32)
    other = FlexibleLeViT(arch=SMALL, img_size=64)
    with torch.no_grad():
        for p in other.parameters():
            p.normal_()
    model.load_state_dict(other.state_dict())
    attn = model.stages[0][0].block
    torch.testing.assert_close(
        attn.ab, other.stages[0][0].block.attention_biases[
            :, attn.attention_bias_idxs])
    torch.testing.assert_close(model(x), other.eval()(x))
