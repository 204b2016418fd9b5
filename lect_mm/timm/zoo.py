"""The zoo's timm names: which config each builds, and its pretrained_cfg.

Each name builds the ``model`` of one config under
``configs/_base_/models/`` (the same file the training configs inherit) as
a :class:`~lect_mm.timm.model.ZooTimmModel`. Its untagged ``pretrained_cfg``
describes the zoo's default training protocol, CIFAR-10 resized to 224
(CCT: its native 32x32): its mean and std, a plain resize (``crop_pct``
1.0, bilinear) and 10 classes, and names no weights (``pretrained=True``
takes a file: ``pretrained_cfg_overlay=dict(file=CKPT)``).

The authors' published weights of a zoo model (:data:`TAGS`: SHI-Labs'
CCT-7/3x1, FAIR's LeViT-128S) are pretrained tags
(``cct_7_3x1.shi_cifar100_300e``), listed by ``timm.list_pretrained()``:
the URL is their entry's in lect_mm's model index (the one
``mmpretrain.get_model`` loads), the model is that entry's config's, and
the checkpoint is converted on load (:func:`checkpoint_filter_fn`). See
``docs/timm.md``.

Registering never replaces a model of timm: a name timm already has raises.
"""
import copy
import functools
import os.path as osp
import sys
from dataclasses import dataclass
from typing import Dict, Optional, Tuple
from urllib.error import URLError

import safetensors.torch
import timm
import torch
from mmengine.config import Config
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import (build_model_with_cfg, generate_default_cfgs,
                         get_pretrained_cfg, register_model)

from lect_mm.model_index import index_entry, mim_root
from lect_mm.models.authors_weights import PREFIX
from .model import ZooTimmModel, backbone_class
from .weights import (as_plain, checkpoint_filter_fn, config_differences,
                      recorded_model_cfg)

#: RGB mean and std of CIFAR-10 (configs/_base_/datasets/cifar10.py / 255).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)


@dataclass(frozen=True)
class ZooEntry:
    """A timm name of the zoo.

    Attributes:
        config (str): Base name of the config under
            ``configs/_base_/models/``.
        input_size (int): Side of the input the config trains on.
        fixed_input_size (bool): Whether other sizes are refused.
        feature_stages (int): How many of the last stages ``features_only``
            returns by default.
        classifier (str): The classifier layer.
        pool_size (int, optional): Side of ``forward_features``' map at
            ``input_size`` (None: CeiT with LCA returns pooled features).
        min_input_size (int, optional): The smallest input side accepted
            (timm's ``min_input_size``; None: any).
        default_tag (str, optional): The pretrained tag the name alone
            means, one of :data:`TAGS` whose model is the config's (None:
            the untagged cfg, without weights).
    """
    config: str
    input_size: int = 224
    fixed_input_size: bool = False
    feature_stages: int = 3
    classifier: str = 'head.fc'
    pool_size: Optional[int] = None
    min_input_size: Optional[int] = None
    default_tag: Optional[str] = None


@dataclass(frozen=True)
class AuthorsTag:
    """A pretrained tag of a zoo name: its authors' published weights.

    Attributes:
        index_name (str): Their entry in lect_mm's model index, whose
            ``Weights`` (``lect_mm+URL``) and ``Config`` (the model they
            belong to) the tag serves; ``mmpretrain.get_model(index_name,
            pretrained=True)`` loads the same weights.
        num_classes (int): Their classes.
        mean, std (tuple): The authors' test-time normalisation (the
            config's ``data_preprocessor`` / 255).
        crop_pct (float): The authors' test-time crop.
        interpolation (str): The authors' resize interpolation.
        origin_url (str): The authors' code.
        paper_ids (str): The paper.
        classifier (str | tuple, optional): The classifier layers of the
            tag's model where they differ from the name's.
    """
    index_name: str
    num_classes: int
    mean: Tuple[float, float, float]
    std: Tuple[float, float, float]
    crop_pct: float
    interpolation: str
    origin_url: str
    paper_ids: str
    classifier: Optional[Tuple[str, ...]] = None


ZOO = {
    'lect_v1': ZooEntry('lect_v1', pool_size=14),
    'lect_v2': ZooEntry('lect_v2', pool_size=14),
    'lect_v3': ZooEntry('lect_v3', pool_size=14),
    'lect_v1_ablation': ZooEntry('lect_v1_ablation', pool_size=14),
    'ceit_gap': ZooEntry('ceit_gap', pool_size=14),
    'ceit_ref': ZooEntry('ceit_ref'),
    'ceit_t': ZooEntry('ceit_t'),
    'vitae_t': ZooEntry('vitae_t', pool_size=14),
    'vitae_xs': ZooEntry('vitae_xs', pool_size=14),
    'cct_7_3x1': ZooEntry(
        'cct_7_3x1', 32, True, pool_size=16, default_tag='shi_cifar10_300e'),
    'cct_2_3x2': ZooEntry(
        'cct_2_3x2', 32, True, feature_stages=2, pool_size=8),
    # its window attention needs sides of 224, 448, ... (217 at least)
    'alternet18': ZooEntry(
        'alternet18', feature_stages=4, pool_size=7, min_input_size=224),
    'flexible_levit_64s': ZooEntry(
        'levit_64s', fixed_input_size=True, classifier='head.head.linear',
        pool_size=4),
    'flexible_levit_128s': ZooEntry(
        'levit_128s', fixed_input_size=True, classifier='head.head.linear',
        pool_size=4),
    'narrow_resnet_report': ZooEntry(
        'resnet_report', feature_stages=4, pool_size=7),
}


_SHI_LABS = dict(
    crop_pct=1.0,  # 32x32 test images, not resized
    interpolation='bicubic',
    origin_url='https://github.com/SHI-Labs/Compact-Transformers',
    paper_ids='arXiv:2104.05704')
# their configs/datasets/cifar10.yml and cifar100.yml
_SHI_C10 = dict(
    _SHI_LABS, num_classes=10, mean=(0.4914, 0.4822, 0.4465),
    std=(0.2470, 0.2435, 0.2616))
_SHI_C100 = dict(
    _SHI_LABS, num_classes=100, mean=(0.5071, 0.4867, 0.4408),
    std=(0.2675, 0.2565, 0.2761))

#: The authors' weights of zoo names, as pretrained tags: name -> tag -> tag.
TAGS: Dict[str, Dict[str, AuthorsTag]] = {
    'cct_7_3x1': {
        'shi_cifar10_300e':
        AuthorsTag('cct-7-3x1_3rdparty-300e_cifar10', **_SHI_C10),
        'shi_cifar100_300e':
        AuthorsTag('cct-7-3x1_3rdparty-300e_cifar100', **_SHI_C100),
        'shi_sine_cifar10_1500e':
        AuthorsTag('cct-7-3x1-sine_3rdparty-1500e_cifar10', **_SHI_C10),
        'shi_sine_cifar10_5000e':
        AuthorsTag('cct-7-3x1-sine_3rdparty-5000e_cifar10', **_SHI_C10),
        'shi_sine_cifar100_1500e':
        AuthorsTag('cct-7-3x1-sine_3rdparty-1500e_cifar100', **_SHI_C100),
        'shi_sine_cifar100_5000e':
        AuthorsTag('cct-7-3x1-sine_3rdparty-5000e_cifar100', **_SHI_C100),
    },
    'flexible_levit_128s': {
        # facebookresearch/LeViT datasets.py: resize 256 bicubic, crop 224
        'fb_dist_in1k':
        AuthorsTag(
            'flexible-levit-128s_3rdparty_in1k',
            num_classes=1000,
            mean=IMAGENET_DEFAULT_MEAN,
            std=IMAGENET_DEFAULT_STD,
            crop_pct=0.875,
            interpolation='bicubic',
            origin_url='https://github.com/facebookresearch/LeViT',
            paper_ids='arXiv:2104.01136',
            # the distillation head's two classifiers
            classifier=('head.head.linear', 'head.head_dist.linear')),
    },
}


def tag_url(name: str, tag: str) -> str:
    """The URL of a tag's weights: its model-index entry's ``Weights``
    without the ``lect_mm+`` prefix."""
    return index_entry(TAGS[name][tag].index_name)['Weights'][len(PREFIX):]


def mmpretrain_name(model_name: str) -> str:
    """The model-index name of ``'name.tag'`` (the same weights through
    ``mmpretrain.get_model``)."""
    name, _, tag = model_name.partition('.')
    if name not in TAGS or tag not in TAGS[name]:
        raise KeyError(f'{model_name!r} is not a tag of the zoo; tags: '
                       f'{sorted(n + "." + t for n in TAGS for t in TAGS[n])}')
    return TAGS[name][tag].index_name


def config_path(name: str) -> str:
    """The config file a zoo name builds."""
    if name not in ZOO:
        raise KeyError(f'{name!r} is not a lect_mm timm model; choose from '
                       f'{sorted(ZOO)}.')
    return osp.join(
        mim_root(), 'configs', '_base_', 'models', ZOO[name].config + '.py')


@functools.lru_cache(maxsize=None)
def _model_cfg(name: str) -> dict:
    return Config.fromfile(config_path(name)).model.to_dict()


@functools.lru_cache(maxsize=None)
def _tag_model_cfg(name: str, tag: str) -> dict:
    """The model of a tag's model-index config (without the data
    preprocessor, which timm's data config replaces)."""
    config = index_entry(TAGS[name][tag].index_name)['Config']
    model = Config.fromfile(str(mim_root() / config)).model.to_dict()
    model.pop('data_preprocessor', None)
    return model


def model_cfg(name: str) -> dict:
    """The ``model`` dict of the config a zoo name builds (a copy)."""
    return copy.deepcopy(_model_cfg(name))


def takes_img_size(name: str) -> bool:
    """Whether zoo model ``name`` takes ``img_size`` (the size its
    backbone is built for: LeCT, CeiT, CCT, LeViT)."""
    return backbone_class(_model_cfg(name)['backbone']).takes_img_size


def first_conv(name: str) -> Tuple[str, ...]:
    """The convolutions of zoo model ``name`` that read the image, as
    paths in the model (the backbone's
    :meth:`~lect_mm.models.backbones.ZooBackbone.first_conv`)."""
    backbone = _model_cfg(name)['backbone']
    convs = backbone_class(backbone).first_conv(backbone.get('arch'))
    convs = (convs, ) if isinstance(convs, str) else convs
    return tuple(f'backbone.{c}' for c in convs)


def model_args(name: str, cfg_model: dict) -> dict:
    """The ``timm.create_model(name, **args)`` arguments that build the
    model of ``cfg_model`` (a config's ``model``, e.g. a checkpoint's
    recorded one) as zoo model ``name``: ``num_classes``, ``in_chans`` and
    every backbone argument the config sets otherwise than the name's
    config (what the HF converter carries into ``config.json``).

    Raises:
        ValueError: ``cfg_model`` is not a model ``name`` builds: another
            neck, head, backbone type, arch or ``out_type``.
    """
    base, cfg_model = _model_cfg(name), as_plain(dict(cfg_model))
    head, backbone = cfg_model.get('head') or {}, cfg_model['backbone']
    fixed = [('type', cfg_model.get('type'), base['type']),
             ('neck', cfg_model.get('neck'), base.get('neck')),
             ('backbone.type', backbone.get('type'),
              base['backbone']['type'])]
    fixed += [(f'head.{k}', head.get(k), base['head'].get(k))
              for k in ('type', 'in_channels', 'distillation')]
    fixed += [(f'backbone.{k}', backbone.get(k), base['backbone'].get(k))
              for k in ('arch', 'out_type')]
    refused = [f'{k}: {a!r} (the model of {name}: {b!r})'
               for k, a, b in fixed if as_plain(a) != as_plain(b)]
    if refused:
        raise ValueError(f'This model cannot be built as {name}: '
                         + '; '.join(refused))
    args = dict(num_classes=head['num_classes'],
                in_chans=backbone.get('in_channels', 3))
    skip = ('type', 'arch', 'in_channels', 'out_indices', 'out_type')
    for key, value in backbone.items():
        if key not in skip and value != as_plain(base['backbone'].get(key)):
            args[key] = value
    return args


def _pretrained_cfg(name: str, entry: ZooEntry) -> dict:
    side = entry.input_size
    convs = first_conv(name)
    return dict(
        url='',
        num_classes=10,
        input_size=(3, side, side),
        pool_size=None if entry.pool_size is None else (entry.pool_size, ) * 2,
        crop_pct=1.0,
        crop_mode='center',
        interpolation='bilinear',
        fixed_input_size=entry.fixed_input_size,
        min_input_size=None if entry.min_input_size is None else
        (3, entry.min_input_size, entry.min_input_size),
        mean=CIFAR10_MEAN,
        std=CIFAR10_STD,
        first_conv=convs[0] if len(convs) == 1 else convs,
        classifier=entry.classifier,
        license='apache-2.0',
    )


def _tagged_cfg(name: str, tag: str) -> dict:
    t = TAGS[name][tag]
    cfg = _pretrained_cfg(name, ZOO[name])
    if t.classifier is not None:
        cfg['classifier'] = t.classifier
    cfg.update(
        url=tag_url(name, tag),
        num_classes=t.num_classes,
        mean=tuple(t.mean),
        std=tuple(t.std),
        crop_pct=t.crop_pct,
        interpolation=t.interpolation,
        origin_url=t.origin_url,
        paper_ids=t.paper_ids)
    return cfg


def _default_cfgs() -> dict:
    """timm's cfgs: the authors' tags first, so that a name's weighted tag
    is its default where ``default_tag`` says so; otherwise the untagged
    cfg stays the default (timm's ``name.*`` priority mark)."""
    cfgs = {}
    for name, entry in ZOO.items():
        for tag in TAGS.get(name, {}):
            cfgs[f'{name}.{tag}'] = _tagged_cfg(name, tag)
        if name not in TAGS:
            cfgs[name] = _pretrained_cfg(name, entry)
        elif entry.default_tag is None:
            cfgs[f'{name}.*'] = _pretrained_cfg(name, entry)
    return cfgs


default_cfgs = generate_default_cfgs(_default_cfgs())


def _read_file(path: str) -> dict:
    """A checkpoint file as saved (a ``.safetensors`` state dict, or what
    ``torch.load`` gives with ``weights_only=True``, as timm reads it)."""
    if str(path).endswith('.safetensors'):
        return safetensors.torch.load_file(path)
    return torch.load(path, map_location='cpu', weights_only=True)


def _describe_file(name: str, overlay: dict, state_dict: dict) -> dict:
    """``overlay`` with the classes and input channels of the checkpoint
    it names, where it does not set them: the zoo's pretrained_cfg
    cannot know a file's, and timm drops a classifier whose classes differ
    from the pretrained_cfg's (or adapts a stem whose channels do)."""
    overlay = dict(overlay)
    entry = ZOO[name]
    head = state_dict.get(entry.classifier + '.weight')
    if head is not None:
        overlay.setdefault('num_classes', head.shape[0])
    stem = state_dict.get(first_conv(name)[0] + '.weight')
    if stem is not None:
        side = entry.input_size
        overlay.setdefault('input_size', (stem.shape[1], side, side))
    return overlay


def _checked_filter(state_dict: dict, model: ZooTimmModel, recorded: dict,
                    path: str) -> dict:
    """:func:`checkpoint_filter_fn`, then refusing a file whose recorded
    model differs from ``model`` (timm calls it with the built model)."""
    state_dict = checkpoint_filter_fn(state_dict, model)
    diffs = config_differences(recorded, model.model_cfg)
    if diffs:
        name = model.pretrained_cfg.get('architecture')
        raise ValueError(
            f'{path} records a model trained with other arguments than '
            f'{name}: ' + '; '.join(diffs) + '. Build the model with the '
            "file's arguments (timm.create_model(name, **args), e.g. "
            "attn_cfg=... as the file's config sets them), or convert the "
            'file with tools/model_converters/lect_mm2timm_hf.py, whose '
            'config.json carries them.')
    return state_dict


def create_zoo_model(name: str, pretrained: bool = False, **kwargs):
    """Build zoo model ``name`` through timm's builder (what
    ``timm.create_model(name, ...)`` calls).

    A tag of :data:`TAGS` (``pretrained_cfg='shi_cifar100_300e'``, as
    ``create_model('cct_7_3x1.shi_cifar100_300e')`` passes it) builds the
    model of its model-index config. A checkpoint file
    (``pretrained_cfg_overlay=dict(file=...)``) gives its classes and input
    channels, and one that records its config (``meta.cfg``) must record
    the model being built
    (:func:`~lect_mm.timm.weights.config_differences`)."""
    feature_cfg = dict(
        feature_cls='getter', out_indices=ZOO[name].feature_stages)
    tag = kwargs.get('pretrained_cfg')
    tag = tag if isinstance(tag, str) else None
    cfg = model_cfg(name)
    if tag in TAGS.get(name, {}) and tag != ZOO[name].default_tag:
        cfg = copy.deepcopy(_tag_model_cfg(name, tag))
    overlay = kwargs.get('pretrained_cfg_overlay') or {}
    filter_fn = checkpoint_filter_fn
    if pretrained and overlay.get('file'):
        checkpoint = _read_file(overlay['file'])
        state_dict = checkpoint_filter_fn(checkpoint)
        kwargs['pretrained_cfg_overlay'] = _describe_file(
            name, overlay, state_dict)
        recorded = recorded_model_cfg(checkpoint)
        if recorded is not None:
            filter_fn = functools.partial(
                _checked_filter, recorded=recorded, path=overlay['file'])
    try:
        return build_model_with_cfg(
            ZooTimmModel,
            name,
            pretrained,
            model_cfg=cfg,
            feature_cfg=feature_cfg,
            pretrained_filter_fn=filter_fn,
            **kwargs)
    except URLError as e:
        full = f'{name}.{tag or ZOO[name].default_tag}'
        url = get_pretrained_cfg(full).url
        raise RuntimeError(
            f'Could not download {url} ({e.reason}). Without network, '
            'download it elsewhere and load the file, converted as from the '
            f"URL: timm.create_model('{full}', pretrained=True, "
            "pretrained_cfg_overlay=dict(file='/path/to/"
            f"{osp.basename(url)}')).") from e


def _entrypoint(name: str):

    def entrypoint(pretrained: bool = False, **kwargs) -> ZooTimmModel:
        return create_zoo_model(name, pretrained=pretrained, **kwargs)

    entrypoint.__name__ = entrypoint.__qualname__ = name
    entrypoint.__module__ = __name__
    entrypoint.__doc__ = (f'{name}: the model of configs/_base_/models/'
                          f'{ZOO[name].config}.py.')
    return entrypoint


def register_zoo() -> None:
    """Register every zoo name with timm; a name timm already knows from
    elsewhere raises (a second call leaves the zoo's own names)."""
    ours = {
        n
        for n in ZOO if timm.is_model(n)
        and timm.models.model_entrypoint(n).__module__ == __name__
    }
    taken = sorted(n for n in ZOO if timm.is_model(n) and n not in ours)
    if taken:
        raise RuntimeError(
            f'timm already has models named {taken}; lect_mm.timm does not '
            'replace them.')
    module = sys.modules[__name__]
    for name in ZOO:
        if name not in ours:
            fn = _entrypoint(name)
            setattr(module, name, fn)
            register_model(fn)
