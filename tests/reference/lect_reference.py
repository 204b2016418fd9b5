"""An independent, reference-layout LeCT written from SPEC.md for tests only.

Plain ``torch.nn`` modules whose ``state_dict`` keys are exactly those of the
author's reference implementation (SPEC §7): ``patch_embedI``, ``blocksI.J``
(``norm1``, ``leatt``, ``norm2``, ``leff``), ``normI`` and ``head``. The
attention follows SPEC §2 literally: the (Nq x Nq) logit map is resized along
the key axis to (Nq x N) before the softmax. Nothing here imports lect_mm, so
the equivalence tests compare two implementations written apart.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange

VARIANTS = {
    'v1': dict(num_heads=(2, 4, 6), sr_ratios=(14, 7, 2),
               modes=('bilinear', 'bilinear', 'bilinear')),
    'v2': dict(num_heads=(2, 3, 7), sr_ratios=(14, 7, 7),
               modes=('bicubic', 'bilinear', 'bilinear'),
               h_ratios=(1 / 2, 1 / 4, 1 / 8)),
    'v3': dict(num_heads=(2, 4, 6), sr_ratios=(14, 7, 2),
               modes=('bilinear', 'bilinear', 'bilinear')),
}
EMBED_DIMS = (64, 128, 192)
DEPTHS = (1, 3, 1)
FFN_RATIOS = (2, 3, 4)


def _dwconv(channels, bias=False):
    return nn.Conv2d(channels, channels, 3, 1, 1, groups=channels, bias=bias)


class Resize(nn.Module):
    """Parameter-free resize by an integer factor."""

    def __init__(self, factor, mode):
        super().__init__()
        self.factor, self.mode = factor, mode

    def forward(self, x):
        h, w = x.shape[-2:]
        return F.interpolate(x, size=(h * self.factor, w * self.factor),
                             mode=self.mode, align_corners=False)


class ToGroups(nn.Module):
    """(B, c, h, w) -> (B, c*h*w, 1, 1), channel order (c, h, w)."""

    def forward(self, x):
        return rearrange(x, 'b c h w -> b (c h w) 1 1')


class FromGroups(nn.Module):
    """(B, c*h*w, K, K) -> (B, c, h*K, w*K): each patch to its position."""

    def __init__(self, channels, h, w):
        super().__init__()
        self.c, self.h, self.w = channels, h, w

    def forward(self, x):
        return rearrange(x, 'b (c h w) p q -> b c (h p) (w q)',
                         c=self.c, h=self.h, w=self.w)


class PatchEmbed(nn.Module):

    def __init__(self, in_chans, dim, kernel, stride):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, kernel, stride, kernel // 2)
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        x = self.proj(x)
        hw = x.shape[-2:]
        return self.norm(x.flatten(2).transpose(1, 2)), hw


def _key_upsampled_attention(q, k, v, hw, pooled, scale, mode):
    """Literal SPEC §2: logits (Nq x Nq) -> resize key axis -> softmax.

    q, k: (B, m, Nq, dq); v: (B, m, N, dv). Returns (B, m, Nq, dv).
    """
    b, m, nq, _ = q.shape
    logits = q @ k.transpose(-2, -1)
    logits = logits.reshape(b * m, nq, *pooled)
    logits = F.interpolate(logits, size=tuple(hw), mode=mode,
                           align_corners=False)
    logits = logits.reshape(b, m, nq, -1) * scale
    return logits.softmax(dim=-1) @ v


class LeAtt(nn.Module):
    """LeMSA of LeCT v1 (query upsampler bilinear+DWConv+BN) or v3 (SV
    ConvTranspose), reference layout."""

    def __init__(self, dim, heads, sr, mode, variant, pooled=None):
        super().__init__()
        self.heads, self.sr, self.mode, self.scale = heads, sr, mode, dim**-0.5
        self.proj_v = nn.Linear(dim, dim, bias=False)
        self.conv1 = nn.Sequential(_dwconv(dim), nn.BatchNorm2d(dim))
        self.conv2 = nn.Sequential(_dwconv(dim), nn.BatchNorm2d(dim))
        if variant == 'v3':
            c = int(dim * 0.1)
            g = c * pooled[0] * pooled[1]
            self.v_upsample = nn.Sequential(
                nn.Conv2d(dim, c, 1, bias=False), ToGroups(),
                nn.ConvTranspose2d(g, g, sr, sr, groups=g, bias=True),
                FromGroups(c, *pooled), nn.Conv2d(c, dim, 1, bias=False))
        else:
            self.v_upsample = nn.Sequential(
                Resize(sr, mode), _dwconv(dim), nn.BatchNorm2d(dim))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, hw):
        h, w = hw
        v = self.proj_v(x)
        a = self.conv1(rearrange(v, 'b (h w) c -> b c h w', h=h, w=w))
        b = self.conv2(F.gelu(a))
        q = F.avg_pool2d(a, self.sr, self.sr)
        k = F.avg_pool2d(b, self.sr, self.sr)
        pooled = q.shape[-2:]
        q, k = (rearrange(t, 'b (m d) h w -> b m (h w) d', m=self.heads)
                for t in (q, k))
        vh = rearrange(v, 'b n (m d) -> b m n d', m=self.heads)
        o = _key_upsampled_attention(q, k, vh, hw, pooled, self.scale,
                                     self.mode)
        o = rearrange(o, 'b m (h w) d -> b (m d) h w', h=pooled[0])
        out = self.v_upsample(o) + F.gelu(b)
        return self.proj(rearrange(out, 'b c h w -> b (h w) c'))


class LeAttV2(nn.Module):
    """LeCT v2 frequency-ramp split attention (SPEC §6), reference layout."""

    def __init__(self, dim, heads, sr, mode, h_ratio):
        super().__init__()
        self.heads, self.sr, self.mode, self.scale = heads, sr, mode, dim**-0.5
        self.h_dim = int(dim * h_ratio)
        l_dim = dim - self.h_dim
        self.proj_v = nn.Linear(self.h_dim, l_dim, bias=False)
        self.conv1 = nn.Sequential(_dwconv(l_dim), nn.BatchNorm2d(l_dim))
        self.conv2 = nn.Sequential(_dwconv(l_dim), nn.BatchNorm2d(l_dim))
        self.conv3 = nn.Sequential(
            nn.Conv2d(l_dim, self.h_dim, 1, bias=True),
            nn.BatchNorm2d(self.h_dim))
        self.v_conv = _dwconv(l_dim)
        self.v_bn = nn.BatchNorm2d(l_dim)
        self.proj = nn.Linear(dim, dim)

    def _pool(self, t):
        avg = F.avg_pool2d(t, self.sr, self.sr)
        mx = F.max_pool2d(t, self.sr, self.sr)
        avg, mx = (rearrange(p, 'b (m d) h w -> b m (h w) d', m=self.heads)
                   for p in (avg, mx))
        return torch.cat([avg, mx], dim=-1), avg.shape

    def forward(self, x, hw):
        h, w = hw
        v = self.proj_v(x[..., :self.h_dim])
        a = self.conv1(rearrange(v, 'b (h w) c -> b c h w', h=h, w=w))
        b = self.conv2(F.gelu(a))
        q, _ = self._pool(a)
        k, _ = self._pool(b)
        ph, pw = h // self.sr, w // self.sr
        vh = rearrange(v, 'b n (m d) -> b m n d', m=self.heads)
        o = _key_upsampled_attention(q, k, vh, hw, (ph, pw), self.scale,
                                     self.mode)
        o = rearrange(o, 'b m (h w) d -> b (m d) h w', h=ph)
        o = F.interpolate(o, size=(h, w), mode=self.mode, align_corners=False)
        low = self.v_bn(self.v_conv(o))
        high = F.gelu(self.conv3(b))
        out = torch.cat([high, low], dim=1)
        return self.proj(rearrange(out, 'b c h w -> b (h w) c'))


class LeFF(nn.Module):

    def __init__(self, dim, ratio):
        super().__init__()
        hid = dim * ratio
        self.conv1, self.bn1 = nn.Conv2d(dim, hid, 1), nn.BatchNorm2d(hid)
        self.conv2 = nn.Conv2d(hid, hid, 3, 1, 1, groups=hid)
        self.bn2 = nn.BatchNorm2d(hid)
        self.conv3, self.bn3 = nn.Conv2d(hid, dim, 1), nn.BatchNorm2d(dim)

    def forward(self, x, hw):
        x = rearrange(x, 'b (h w) c -> b c h w', h=hw[0], w=hw[1])
        x = F.gelu(self.bn1(self.conv1(x)))
        x = F.gelu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        return rearrange(x, 'b c h w -> b (h w) c')


class Block(nn.Module):

    def __init__(self, dim, ratio, leatt):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.leatt = leatt
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.leff = LeFF(dim, ratio)

    def forward(self, x, hw):
        x = x + self.leatt(self.norm1(x), hw)
        return x + self.leff(self.norm2(x), hw)


class ReferenceLeCT(nn.Module):
    """Reference-layout LeCT (eval-only: no dropout / drop path)."""

    def __init__(self, variant='v1', num_classes=10, img_size=224):
        super().__init__()
        cfg = VARIANTS[variant]
        in_chans, res = 3, img_size
        for i in range(3):
            kernel, stride = (7, 4) if i == 0 else (3, 2)
            res = (res + 2 * (kernel // 2) - kernel) // stride + 1
            dim, sr = EMBED_DIMS[i], cfg['sr_ratios'][i]
            setattr(self, f'patch_embed{i + 1}',
                    PatchEmbed(in_chans, dim, kernel, stride))
            blocks = []
            for _ in range(DEPTHS[i]):
                if variant == 'v2':
                    att = LeAttV2(dim, cfg['num_heads'][i], sr,
                                  cfg['modes'][i], cfg['h_ratios'][i])
                else:
                    att = LeAtt(dim, cfg['num_heads'][i], sr, cfg['modes'][i],
                                variant, pooled=(res // sr, res // sr))
                blocks.append(Block(dim, FFN_RATIOS[i], att))
            setattr(self, f'blocks{i + 1}', nn.ModuleList(blocks))
            setattr(self, f'norm{i + 1}', nn.LayerNorm(dim, eps=1e-6))
            in_chans = dim
        self.head = nn.Linear(EMBED_DIMS[-1], num_classes)

    def forward(self, x):
        for i in range(1, 4):
            x, hw = getattr(self, f'patch_embed{i}')(x)
            for blk in getattr(self, f'blocks{i}'):
                x = blk(x, hw)
            x = getattr(self, f'norm{i}')(x)
            if i < 3:
                x = rearrange(x, 'b (h w) c -> b c h w', h=hw[0], w=hw[1])
        return self.head(x.mean(dim=1))


def randomize_(model, seed=0):
    """Fill every parameter and BN running statistic with non-trivial values.

    Weights get a scale that keeps activations O(1) through the network, so
    that a wrong key mapping cannot hide behind a vanishing signal.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if t.dtype == torch.long:
                continue
            if name.endswith('running_var'):
                t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
            elif name.endswith(('running_mean', 'bias')):
                t.copy_(torch.randn(t.shape, generator=gen) * 0.1)
            elif t.dim() == 1:
                t.copy_(1 + torch.randn(t.shape, generator=gen) * 0.1)
            else:
                fan_in = t[0].numel()
                t.copy_(torch.randn(t.shape, generator=gen) / fan_in**0.5)
    return model
