from .alternet import AlterNetMSABlock, PreActBasicBlock, WindowAttention2d
from .attention import MultiheadSelfAttention
from .cct import CCTEncoderLayer, CCTTokenizer, SeqPool
from .ceit import CeiTBlock, CeiTLeFF, Image2Tokens, LCABlock, LCAttention
from .dropout import FastDropout
from .embed import ConvPatchEmbed
from .ffn import LeFFN
from .lect_block import LeCTBlock
from .lemsa import LeMSA, LeMSAv2
from .pooled_attention import PooledKeyAttention
from .upsample import (ResizeDWConvUpsampler, ResizeUpsampler,
                       SVConvTransposeUpsampler)
from .vitae import PCM, PRM, NormalCell, ReductionCell, TokenPerformer

__all__ = [
    'MultiheadSelfAttention', 'ConvPatchEmbed', 'FastDropout', 'LeFFN',
    'LeCTBlock', 'LeMSA', 'LeMSAv2', 'PooledKeyAttention',
    'ResizeUpsampler', 'ResizeDWConvUpsampler', 'SVConvTransposeUpsampler',
    'AlterNetMSABlock', 'PreActBasicBlock', 'WindowAttention2d',
    'CCTEncoderLayer', 'CCTTokenizer', 'SeqPool', 'CeiTBlock', 'CeiTLeFF',
    'Image2Tokens', 'LCABlock', 'LCAttention', 'PCM', 'PRM', 'NormalCell',
    'ReductionCell', 'TokenPerformer',
]
