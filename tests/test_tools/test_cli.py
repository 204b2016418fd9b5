"""lect_mm.cli: what tools/train.py and tools/test.py share."""
import argparse
import os
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from lect_mm.cli import (parse_launcher_args, set_dataloader_defaults,
                         set_work_dir)

ON_CPU = not torch.cuda.is_available()


def _cfg(**loaders):
    return Config(dict(work_dir=None, **loaders))


def test_parse_launcher_args_exports_local_rank():
    saved = os.environ.pop('LOCAL_RANK', None)
    try:
        args = parse_launcher_args(argparse.ArgumentParser(),
                                   ['--local-rank', '1'])
        assert args.launcher == 'none' and args.local_rank == 1
        assert os.environ['LOCAL_RANK'] == '1'
        parse_launcher_args(argparse.ArgumentParser(), ['--local_rank', '0'])
        assert os.environ['LOCAL_RANK'] == '1'  # a launcher's value stays
    finally:
        os.environ.pop('LOCAL_RANK', None)
        if saved is not None:
            os.environ['LOCAL_RANK'] = saved


def test_set_work_dir():
    cfg = _cfg()
    set_work_dir(cfg, None, 'configs/a/b_c.py')
    assert cfg.work_dir == osp.join('./work_dirs', 'b_c')
    set_work_dir(cfg, None, 'other.py')  # the config's own value stays
    assert cfg.work_dir == osp.join('./work_dirs', 'b_c')
    set_work_dir(cfg, 'out', 'other.py')
    assert cfg.work_dir == 'out'


@pytest.mark.skipif(not ON_CPU, reason='pin_memory defaults off on the CPU')
def test_set_dataloader_defaults():
    cfg = _cfg(
        train_dataloader=dict(num_workers=2),
        val_dataloader=None,
        test_dataloader=dict(num_workers=0, pin_memory=True))
    fields = ('train_dataloader', 'val_dataloader', 'test_dataloader')
    set_dataloader_defaults(cfg, fields, persistent_workers=True)
    assert cfg.train_dataloader == dict(
        num_workers=2,
        collate_fn=dict(type='default_collate'),
        pin_memory=False,
        persistent_workers=True)
    assert cfg.val_dataloader is None
    assert cfg.test_dataloader == dict(
        num_workers=0,
        pin_memory=True,  # the config's choice stays
        collate_fn=dict(type='default_collate'))

    set_dataloader_defaults(
        cfg, fields, pin_memory=False, persistent_workers=False)
    assert cfg.test_dataloader.pin_memory is False
    assert cfg.train_dataloader.persistent_workers is False
    assert cfg.test_dataloader.persistent_workers is False

    cfg = _cfg(test_dataloader=dict(num_workers=2))
    set_dataloader_defaults(cfg, ('test_dataloader', ))
    assert 'persistent_workers' not in cfg.test_dataloader  # None: untouched


def test_runs_in_one_second_get_names_of_their_own(monkeypatch, tmp_path):
    from mmengine.config import Config
    from mmengine.logging import MMLogger

    from lect_mm import cli
    monkeypatch.setattr(cli.time, 'strftime',
                        lambda fmt, t=None: '20991231_235959')
    config_file = tmp_path / 'tiny.py'
    config_file.write_text('a = 1\n')
    for make, first_name, second in (
        (lambda: Config(dict()), '20991231_235959', 'run_1'),
        (lambda: Config.fromfile(str(config_file)), 'tiny_20991231_235959',
         'tiny_1'),
        (lambda: Config(dict(experiment_name='mine')),
         'mine_20991231_235959', 'mine_1'),
    ):
        first = make()
        cli.set_unique_experiment_name(first)
        assert first.get('experiment_name') == make().get(
            'experiment_name')  # mmengine's own name is kept
        MMLogger.get_instance(first_name)  # the first run's logger
        cfg = make()
        cli.set_unique_experiment_name(cfg)
        assert cfg.experiment_name == second
        MMLogger.get_instance(f'{second}_20991231_235959')
        third = make()
        cli.set_unique_experiment_name(third)
        assert third.experiment_name == second[:-1] + '2'
