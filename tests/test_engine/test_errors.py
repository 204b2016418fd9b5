"""Config mistakes users meet first are explained with their config path."""
import os.path as osp
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope
from mmengine.runner import Runner
from mmpretrain.registry import DATASETS, MODELS

import lect_mm  # noqa: F401
from lect_mm.cli import merge_cfg_options
from lect_mm.config_errors import explain_config_errors
from lect_mm.engine import ConfigCheckHook, ConfigError, ConfigMismatchError


def _model(**backbone):
    return dict(
        type='ImageClassifier',
        backbone=dict(
            type='ResNet',
            depth=18,
            num_stages=1,
            strides=(1, ),
            dilations=(1, ),
            out_indices=(0, ),
            base_channels=8,
            **backbone),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=8))


def _build(cfg):
    init_default_scope('mmpretrain')
    with explain_config_errors(dict(model=cfg)):
        MODELS.build(cfg)


def test_misspelt_type_names_type_path_and_suggestion():
    cfg = _model()
    cfg['backbone']['type'] = 'ResNett'
    with pytest.raises(ConfigError) as info:
        _build(cfg)
    message = str(info.value)
    assert "type='ResNett'" in message
    assert 'model.backbone.type' in message
    assert 'mmpretrain::model registry' in message
    assert "Did you mean 'ResNet'" in message
    # Still the KeyError mmengine raises, for code that catches it.
    assert isinstance(info.value, KeyError)
    assert 'ResNett is not in the' in str(info.value.__cause__)


def test_unknown_argument_names_key_class_and_valid_arguments():
    with pytest.raises(ConfigError) as info:
        _build(_model(foo=1))
    message = str(info.value)
    assert message.startswith("model.backbone.foo: ResNet has no argument "
                              "'foo'.")
    assert 'Valid arguments of ResNet: depth, in_channels' in message
    assert isinstance(info.value, TypeError)


def test_unknown_argument_suggests_close_name():
    with pytest.raises(ConfigError, match="Did you mean 'drop_path_rate'"):
        _build(_model(drop_path_rat=0.1))


def test_unrelated_errors_pass_through_unchanged():
    with pytest.raises(KeyError) as info:
        with explain_config_errors(dict(model=_model())):
            raise KeyError('something else')
    assert type(info.value) is KeyError
    with pytest.raises(TypeError) as info:
        with explain_config_errors(dict(model=_model())):
            raise TypeError(
                "Other.__init__() got an unexpected keyword argument 'x'")
    assert type(info.value) is TypeError


# ------------------------------------------------ deeper than the backbone
REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _config(name, **options):
    cfg = Config.fromfile(osp.join(REPO, 'configs', name))
    cfg.merge_from_dict(options)
    return cfg


def _build_model(cfg):
    init_default_scope('mmpretrain')
    with pytest.raises(ConfigError) as info:
        with explain_config_errors(cfg):
            MODELS.build(cfg.model)
    return str(info.value)


def test_lect_merged_block_typo_names_path_as_written():
    """LeCT merges attn_cfg into each stage's LeMSA config and builds the
    blocks itself; the path is still the one the user wrote."""
    message = _build_model(
        _config('demo/lect_digits.py', **{
            'model.backbone.attn_cfg.0.sr_ratoi': 7}))
    assert message.startswith(
        "model.backbone.attn_cfg[0].sr_ratoi: LeMSA has no argument "
        "'sr_ratoi'. Did you mean 'sr_ratio'?")
    assert 'Valid arguments of LeMSA: embed_dims, num_heads, sr_ratio' in (
        message)


def test_typo_in_the_contract_arguments_names_the_backbone():
    """frozen_stages reaches LeCT through **kwargs (ZooBackbone's): the
    message still names LeCT and lists every argument it takes."""
    message = _build_model(
        _config('demo/lect_digits.py', **{'model.backbone.frozen_stage': 1}))
    assert message.startswith(
        "model.backbone.frozen_stage: LeCT has no argument 'frozen_stage'. "
        "Did you mean 'frozen_stages'?")
    assert 'conv_norm_cfg, deploy, init_cfg, num_stages, out_indices, ' in (
        message)


def test_typo_two_levels_below_a_merged_block():
    message = _build_model(
        _config('demo/lect_digits.py', **{
            'model.backbone.attn_cfg.1.query_upsampler.modee': 'bicubic'}))
    assert message.startswith(
        'model.backbone.attn_cfg[1].query_upsampler.modee: ')
    assert "has no argument 'modee'. Did you mean 'mode'?" in message


def test_norm_cfg_typo_through_mmcv_build_norm_layer():
    """build_norm_layer instantiates the class itself (type 'BN' is
    BatchNorm2d): still named, with the class's valid arguments."""
    message = _build_model(
        _config('_base_/models/ceit_t.py', **{
            'model.backbone.conv_norm_cfg': dict(type='BN', momentumm=0.1)}))
    assert message.startswith(
        "model.backbone.conv_norm_cfg.momentumm: BatchNorm2d has no argument "
        "'momentumm'. Did you mean 'momentum'?")
    assert 'Valid arguments of BatchNorm2d: num_features, eps, momentum' in (
        message)


def test_unknown_nested_type_in_a_merged_block():
    message = _build_model(
        _config('demo/lect_digits.py', **{
            'model.backbone.attn_cfg.0.type': 'LeMSAv3'}))
    assert message.startswith(
        "type='LeMSAv3' (at model.backbone.attn_cfg[0].type) is not in the "
        'mmpretrain::model registry. Did you mean')
    assert "'LeMSAv2'" in message


def test_argument_passed_by_code_is_not_blamed_on_the_config():
    cfg = dict(model=dict(
        type='LeCTBlock', embed_dims=8,
        attn_cfg=dict(type='GlobalAveragePooling'),
        ffn_cfg=dict(type='LeFFN')))
    message = _build_model(Config(cfg))
    assert message.startswith(
        "GlobalAveragePooling has no argument 'embed_dims', which the code "
        'that builds it passes (LeCTBlock > GlobalAveragePooling), not the '
        'config. The config names GlobalAveragePooling at '
        'model.attn_cfg.type')


def test_optimizer_type_typo_is_named():
    """mmengine's optimizer constructor looks the type up itself and fails
    with "None is not a callable object"."""
    cfg = dict(optim_wrapper=dict(optimizer=dict(type='AdamWW', lr=1e-3)))
    init_default_scope('mmpretrain')
    with pytest.raises(ConfigError) as info:
        with explain_config_errors(cfg):
            build_optim_wrapper(torch.nn.Linear(2, 2), cfg['optim_wrapper'])
    assert str(info.value).startswith(
        "type='AdamWW' (at optim_wrapper.optimizer.type) is not registered. "
        "Did you mean 'AdamW'")
    assert 'None is not a callable' in str(info.value.__cause__)


def test_optimizer_argument_typo_is_named():
    cfg = dict(optim_wrapper=dict(optimizer=dict(type='AdamW', lrr=1e-3)))
    init_default_scope('mmpretrain')
    with pytest.raises(ConfigError) as info:
        with explain_config_errors(cfg):
            build_optim_wrapper(torch.nn.Linear(2, 2), cfg['optim_wrapper'])
    assert str(info.value).startswith(
        "optim_wrapper.optimizer.lrr: AdamW has no argument 'lrr'. Did you "
        "mean 'lr'?")


def test_data_transform_typo_is_named():
    loader = dict(dataset=dict(
        type='Digits', split='val', image_size=8, indices=4,
        pipeline=[dict(type='RandomFlip', probb=0.5),
                  dict(type='PackInputs')]))
    init_default_scope('mmpretrain')
    with pytest.raises(ConfigError) as info:
        with explain_config_errors(dict(val_dataloader=loader)):
            DATASETS.build(loader['dataset'])
    assert str(info.value).startswith(
        "val_dataloader.dataset.pipeline[0].probb: RandomFlip has no "
        "argument 'probb'. Did you mean 'prob'?")


def test_cfg_option_on_a_list_names_the_index_to_use():
    cfg = _config('demo/lect_digits.py')
    with pytest.raises(ConfigError) as info:
        merge_cfg_options(cfg, {'model.backbone.attn_cfg.sr_ratoi': 7})
    assert str(info.value) == (
        '--cfg-options model.backbone.attn_cfg.sr_ratoi: '
        'model.backbone.attn_cfg is a list of 3 entries, not a dict; name '
        'the entry by its index, e.g. model.backbone.attn_cfg.0.sr_ratoi')
    merge_cfg_options(cfg, {'model.backbone.attn_cfg.0.sr_ratio': 7})
    assert cfg.model.backbone.attn_cfg[0].sr_ratio == 7


# ---------------------------------------------- checked before iteration 1
def _hook_runner(tmp_path, **options):
    """What ConfigCheckHook reads of a runner, for the tiny Digits config."""
    cfg = _config('../tests/test_engine/data/tiny_digits.py', **options)
    init_default_scope('mmpretrain')
    model = MODELS.build(
        dict(cfg.model, data_preprocessor=dict(
            type='ClsDataPreprocessor', **cfg.data_preprocessor)))
    loader = Runner.build_dataloader(
        dict(cfg.train_dataloader, collate_fn=dict(type='default_collate')),
        seed=0)
    return SimpleNamespace(
        model=model, cfg=cfg, logger=MMLogger.get_instance('config_check'),
        _train_loop=SimpleNamespace(dataloader=loader))


def test_head_in_channels_mismatch_names_both_numbers(tmp_path):
    runner = _hook_runner(tmp_path, **{'model.head.in_channels': 16})
    rng = torch.get_rng_state(), np.random.get_state()[1].copy()
    with pytest.raises(ConfigMismatchError) as info:
        ConfigCheckHook().before_run(runner)
    assert str(info.value).startswith(
        'model.head.in_channels=16, but model.backbone (ResNet) + '
        'model.neck (GlobalAveragePooling) put out 8 channels (one sample '
        'of train_dataloader, input (1, 3, 16, 16)). Set '
        'model.head.in_channels=8')
    # the probe leaves the random generators and the modes as they were
    assert torch.equal(rng[0], torch.get_rng_state())
    assert (rng[1] == np.random.get_state()[1]).all()
    assert all(m.training for m in runner.model.modules())


def test_matching_config_passes_and_changes_nothing(tmp_path):
    runner = _hook_runner(tmp_path)
    runner.model.backbone.eval()
    before = torch.get_rng_state()
    ConfigCheckHook().before_run(runner)
    assert torch.equal(before, torch.get_rng_state())
    assert not runner.model.backbone.training and runner.model.head.training


def test_too_few_classes_in_data_preprocessor_is_named(tmp_path):
    runner = _hook_runner(tmp_path, **{'data_preprocessor.num_classes': 9})
    with pytest.raises(ConfigMismatchError) as info:
        ConfigCheckHook().before_run(runner)
    assert str(info.value).startswith(
        'model.head.num_classes=10 and data_preprocessor.num_classes=9, but '
        'train_dataloader.dataset (Digits: 10 classes, labels up to 9) '
        'needs 10')


class _Labelled:
    """A data set as ConfigCheckHook reads it: classes and labels."""

    def __init__(self, classes, labels):
        self.metainfo = dict(classes=classes) if classes else {}
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def get_gt_labels(self):
        return np.array(self.labels)


def _class_check(model, *datasets):
    """ConfigCheckHook's class checks on train (val, test) loaders of these
    data sets."""
    loaders = [(f'{split}_dataloader', SimpleNamespace(dataset=dataset))
               for split, dataset in zip(('train', 'val', 'test'), datasets)]
    ConfigCheckHook._check_classes(model, {}, loaders)


def _classifier(head=3, pre=None, loss=None):
    return SimpleNamespace(
        head=SimpleNamespace(num_classes=head,
                             loss_module=SimpleNamespace(num_classes=loss)),
        data_preprocessor=SimpleNamespace(num_classes=pre))


def test_class_lists_in_another_order_are_refused():
    with pytest.raises(ConfigMismatchError) as info:
        _class_check(_classifier(), _Labelled(['a', 'b', 'c'], [0, 1, 2]),
                     _Labelled(['a', 'b', 'c'], [0]),
                     _Labelled(['b', 'a', 'c'], [0]))
    assert str(info.value).startswith(
        'train_dataloader.dataset (_Labelled, 3 classes) and '
        'test_dataloader.dataset (_Labelled, 3 classes) do not list the '
        'same classes in the same order: the same names in another order. '
        "A label is an index into the class list, so label 0 means 'a' in "
        "train_dataloader.dataset but 'b' in test_dataloader.dataset")
    _class_check(_classifier(), _Labelled(['a', 'b', 'c'], [0, 1, 2]),
                 _Labelled(['a', 'b', 'c'], [2]))


def test_labels_beyond_the_class_list_are_refused():
    with pytest.raises(ConfigMismatchError,
                       match=r"has labels up to 3, but only 3 classes "
                       r"\('a', 'b', 'c'\)"):
        _class_check(_classifier(), _Labelled(['a', 'b', 'c'], [0, 3]))


def test_num_classes_settings_must_equal_the_classes():
    data = _Labelled(['a', 'b', 'c'], [0, 1, 1])  # 'c' has no sample
    with pytest.raises(ConfigMismatchError) as info:
        _class_check(_classifier(head=2), data)
    assert str(info.value) == (
        'model.head.num_classes=2, but train_dataloader.dataset (_Labelled: '
        "3 classes, labels up to 1) needs 3 ('a', 'b', 'c'): classes 'c' "
        'could never be predicted. Set model.head.num_classes=3.')
    with pytest.raises(ConfigMismatchError,
                       match='head.loss.num_classes=4, but .* different '
                       'widths. Set model.head.loss.num_classes=3.'):
        _class_check(_classifier(loss=4), data)
    _class_check(_classifier(pre=3, loss=3), data)


def test_without_class_lists_the_settings_must_agree():
    data = _Labelled(None, [0, 1])
    _class_check(_classifier(head=5, pre=5), data)
    with pytest.raises(ConfigMismatchError) as info:
        _class_check(_classifier(head=5, pre=4), data)
    assert str(info.value) == (
        'model.head.num_classes=5 and model.data_preprocessor.num_classes=4 '
        'differ: the outputs, the Mixup/CutMix targets and the loss would '
        'have different widths. Set model.data_preprocessor.num_classes=5 '
        '(the number of classes).')


def test_empty_epoch_names_size_batch_ranks_and_drop_last():
    from torch.utils.data import DataLoader

    from lect_mm.engine.checks import empty_epoch_problem
    assert empty_epoch_problem(
        'train_dataloader', DataLoader(list(range(3)), batch_size=4)) is None
    assert empty_epoch_problem(
        'train_dataloader',
        DataLoader(list(range(3)), batch_size=4, drop_last=True)) == (
            'train_dataloader gives 0 iterations per epoch: '
            'train_dataloader.dataset (list) has 3 samples (3 per rank, 1 '
            'rank), batch_size=4, drop_last=True, so nothing would be '
            'trained. Set train_dataloader.batch_size to at most 3, or '
            'train_dataloader.drop_last=False (the last, smaller batch '
            'kept), or add samples.')
    assert 'has no samples' in empty_epoch_problem(
        'val_dataloader', DataLoader([], batch_size=4))


def test_the_engine_imports_no_block_or_model():
    """Configs are explained with registries and signatures only: no
    module of lect_mm.engine, nor lect_mm.config_errors (which explains
    them for the tools), imports lect_mm.blocks or lect_mm.models."""
    import ast
    import glob
    engine = osp.join(REPO, 'lect_mm', 'engine')
    imported = set()
    for path in glob.glob(osp.join(engine, '*.py')) + [
            osp.join(REPO, 'lect_mm', 'config_errors.py')]:
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert 'lect_mm.utils' in imported
    assert not [m for m in imported
                if m.startswith(('lect_mm.blocks', 'lect_mm.models'))]
