"""Config mistakes made on tools/train.py's command line or in config files
stop the run before anything is built or written, named by their config
path: a misspelt top-level key or default hook, an empty training
schedule, a string where a number goes and a cycle of _base_ files."""
import os
import os.path as osp

import pytest

from lect_mm.engine import ConfigError

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(REPO, 'tests', 'test_engine', 'data', 'tiny_digits.py')


@pytest.fixture(autouse=True)
def restored_local_rank(monkeypatch):
    monkeypatch.setenv('LOCAL_RANK', '0')  # parse_args exports it


def _refused(train_tool, tmp_path, *options, config=TINY):
    """The ConfigError of tools/train.py on ``config`` with ``options``; the
    work dir must not have been created."""
    work_dir = tmp_path / 'work'
    with pytest.raises(ConfigError) as info:
        train_tool.main([
            config, '--work-dir',
            str(work_dir), '--cfg-options', 'log_level=WARNING',
            f'experiment_name=config_faults_{tmp_path.name}', *options
        ])
    assert not work_dir.exists()
    return str(info.value)


def test_a_misspelt_top_level_key_is_named(train_tool, tmp_path):
    """Before: ignored, the full schedule trained, exit 0."""
    assert _refused(train_tool, tmp_path, 'trian_cfg.max_epochs=1') == (
        "--cfg-options trian_cfg.max_epochs=1: the config has no key "
        "'trian_cfg', and no part of a run reads it, so it would change "
        "nothing. Did you mean 'train_cfg' or 'val_cfg' or 'env_cfg'?")


def test_a_misspelt_default_hook_is_named(train_tool, tmp_path):
    """Before: KeyError '... must contain the key "type"', no name."""
    message = _refused(train_tool, tmp_path,
                       'default_hooks.chekpoint.interval=5')
    assert message.startswith(
        "default_hooks.chekpoint = {'interval': 5} names no hook type")
    assert message.endswith("Did you mean 'checkpoint'?")


@pytest.mark.parametrize('option', [
    'train_cfg.max_epochs=0', 'train_cfg.max_epochs=-1',
    'train_cfg.max_epochs=two'
])
def test_an_empty_schedule_stops_before_training(train_tool, tmp_path,
                                                 option):
    """Before: exit 0 after "Training took 3.4 s", no checkpoint."""
    value = option.split('=')[1]
    value = value if value.lstrip('-').isdigit() else repr(value)
    assert _refused(train_tool, tmp_path, option) == (
        f'train_cfg.max_epochs={value}: the training loop needs a positive '
        f'whole number of epochs; with {value} it would train nothing.')


def test_an_empty_iteration_schedule_stops_before_training(
        train_tool, tmp_path):
    assert _refused(
        train_tool, tmp_path, 'train_cfg.type=IterBasedTrainLoop',
        'train_cfg.max_iters=0', 'train_cfg.by_epoch=False').startswith(
            'train_cfg.max_iters=0: the training loop needs a positive '
            'whole number of iterations')


def test_a_string_for_a_number_names_key_and_type(train_tool, tmp_path):
    """Before: TypeError "'<=' not supported between instances of 'float'
    and 'str'" from inside AdamW."""
    config = tmp_path / 'adamw.py'
    config.write_text(f"_base_ = '{TINY}'\n"
                      "optim_wrapper = dict(optimizer=dict(\n"
                      "    _delete_=True, type='AdamW', lr=1e-3))\n")
    assert _refused(train_tool, tmp_path, 'optim_wrapper.optimizer.lr=abc',
                    config=str(config)) == (
        "optim_wrapper.optimizer.lr='abc': AdamW takes Tensor or float for "
        "'lr', not a string.")


def test_a_string_for_a_dict_is_named(train_tool, tmp_path):
    """Before: ``ValueError: dictionary update sequence element #0 has
    length 1; 2 is required`` from inside LeCT (--cfg-options gives each
    ``dict(...)`` of a list as a string)."""
    demo = osp.join(REPO, 'configs', 'demo', 'lect_digits.py')
    assert _refused(
        train_tool, tmp_path, 'model.backbone.attn_cfg=[dict(sr_ratio='
        "'abc'),dict(sr_ratio=2),dict(sr_ratio=1)]", config=demo) == (
        "model.backbone.attn_cfg[0]=\"dict(sr_ratio='abc')\": LeCT takes "
        "dict or a sequence of dict for 'attn_cfg', not a list of strings "
        "(--cfg-options reads dict(...) as text: set an entry's keys one by "
        'one, model.backbone.attn_cfg.0.KEY=VALUE, or give the list in a '
        'config file).')


def test_a_cycle_of_base_files_is_named(train_tool, tmp_path):
    """Before: RecursionError after mmengine had recursed for seconds."""
    first, second = (osp.realpath(tmp_path / name)
                     for name in ('first.py', 'second.py'))
    open(first, 'w').write(f"_base_ = ['{TINY}', './second.py']\n")
    open(second, 'w').write("_base_ = './first.py'\nx = 1\n")
    assert _refused(train_tool, tmp_path, config=first) == (
        f'The _base_ files of {first} form a cycle: {first} -> {second} -> '
        f'{first}. Remove one of these _base_ entries.')


def test_every_key_lect_mm_reads_counts_as_read():
    """A top-level key that LectRunner or mmengine's Runner reads is no
    misspelling: found where it is read (LectRunner.config_keys, mmengine's
    cfg.get), ``--cfg-options key=...`` reaches it. The engine reads the
    run's config through LectRunner.settings only."""
    import re

    import lect_mm.engine
    from lect_mm.cli import keys_read_by
    from lect_mm.engine import LectRunner
    root = osp.dirname(lect_mm.engine.__file__)
    read = set()
    for name in os.listdir(root):
        if name.endswith('.py'):
            with open(osp.join(root, name)) as f:
                read |= set(re.findall(
                    r"(?:self|runner)\.cfg\.get\('(\w+)'", f.read()))
    assert read == set()
    known = keys_read_by(LectRunner)
    assert {'resume_schedule', 'stop_signals', 'lock_work_dir'} <= known
    assert set(LectRunner.config_keys) <= known
    assert {'sync_bn', 'model_wrapper_cfg', 'compile', 'load_from'} <= known
