"""Faults injected into tools/train.py and tools/test.py runs on the digits:
damaged, wrong-model and wrong-head checkpoints stop with an error naming
the file and the problem; --resume says what it resumes (or not)."""
import importlib.util
import io
import os
import os.path as osp
import pickle
import shutil
import sys

import pytest
import torch
from cli_utils import log_text
from mmengine.config import Config
from mmpretrain.apis import get_model

from lect_mm.engine import (CheckpointError, CheckpointMismatchError,
                            CheckpointNotFoundError)
from lect_mm.engine.checkpoint_io import add_digest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(REPO, 'tests', 'test_engine', 'data', 'tiny_digits.py')
LECT_V1 = osp.join(REPO, 'configs', 'demo', 'lect_digits.py')
# one epoch of one iteration, quiet
FAST = ['train_cfg.max_epochs=1', 'train_dataloader.dataset.indices=16',
        'log_level=WARNING']


def head_of_100(loader):
    """A 100-class model for data that lists 100 classes (ConfigCheckHook
    refuses a head that does not fit the data): another head than the
    trained one's 10."""
    return ['model.head.num_classes=100', 'data_preprocessor.num_classes=100',
            f'{loader}.dataset.metainfo.classes=' + ','.join(
                f'c{i}' for i in range(100))]


def _load_tool(name):
    spec = importlib.util.spec_from_file_location(
        f'lect_tools_faults_{name}', osp.join(REPO, 'tools', f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train_tool = _load_tool('train')
test_tool = _load_tool('test')


@pytest.fixture(autouse=True)
def restored_local_rank():
    saved = os.environ.get('LOCAL_RANK')
    yield
    os.environ.pop('LOCAL_RANK', None)
    if saved is not None:
        os.environ['LOCAL_RANK'] = saved


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """epoch_1.pth of a real run (1 epoch of 1 iteration, 10 classes)."""
    work_dir = str(tmp_path_factory.mktemp('faults_train'))
    train_tool.main([TINY, '--work-dir', work_dir, '--no-validate',
                     '--cfg-options', *FAST, 'experiment_name=faults'])
    return osp.join(work_dir, 'epoch_1.pth')


def _damaged(src, dst, how, record):
    shutil.copy(src, dst)
    size = osp.getsize(dst)
    with open(dst, 'r+b') as file:
        if how == 'empty':
            file.truncate(0)
        elif how == 'truncated':
            file.truncate(size // 2)
        else:  # a few flipped bytes in the largest tensor's data
            offset, _ = record(dst)
            file.seek(offset)
            chunk = file.read(8)
            file.seek(offset)
            file.write(bytes(b ^ 0xFF for b in chunk))
    return str(dst)


@pytest.mark.parametrize('how, reason', [('empty', 'is empty'),
                                         ('truncated', 'is truncated'),
                                         ('flipped', 'is damaged')])
def test_test_tool_refuses_a_damaged_checkpoint(trained, tmp_path, how,
                                                reason, largest_tensor_record):
    path = _damaged(trained, tmp_path / 'epoch_1.pth', how,
                    largest_tensor_record)
    with pytest.raises(CheckpointError) as info:
        test_tool.main([TINY, path, '--work-dir', str(tmp_path / 'test'),
                        '--cfg-options', 'log_level=WARNING'])
    assert path in str(info.value) and reason in str(info.value)


def test_test_tool_names_a_missing_checkpoint(tmp_path):
    path = str(tmp_path / 'missing.pth')
    with pytest.raises(CheckpointNotFoundError, match='missing.pth'):
        test_tool.main([TINY, path, '--work-dir', str(tmp_path)])


@pytest.mark.parametrize('how', ['resume', 'load_from'])
def test_train_refuses_a_damaged_checkpoint(trained, tmp_path, how,
                                            largest_tensor_record):
    path = _damaged(trained, tmp_path / 'epoch_1.pth', 'flipped',
                    largest_tensor_record)
    source = ['--resume', path] if how == 'resume' else []
    options = [] if how == 'resume' else [f'load_from={path}']
    with pytest.raises(CheckpointError, match='is damaged') as info:
        train_tool.main([TINY, '--work-dir', str(tmp_path / 'run'), *source,
                         '--cfg-options', *FAST, *options])
    assert path in str(info.value)


@pytest.mark.skipif(sys.platform != 'linux', reason='reads /proc/self/fd')
def test_test_tool_scores_the_bytes_it_checked(trained, tmp_path,
                                               monkeypatch):
    """Before: the SHA-256 check and torch.load read the file one after the
    other, so a checkpoint overwritten in place (rsync --inplace, cp over
    it) with another of the same model was scored as the other file, or a
    mix (4 of 60 tries), exit 0. Now it is read once, checked and loaded
    from memory: overwritten after that read, the checked bytes are scored;
    overwritten while it is read, the test stops naming the file."""
    path = tmp_path / 'epoch_1.pth'
    shutil.copy(trained, path)
    other = torch.load(trained, weights_only=True)  # another head
    other['state_dict']['head.fc.bias'][0] = 100.0
    buffer = io.BytesIO()
    torch.save(other, buffer)
    other = add_digest(buffer.getvalue())

    def overwrite():
        with open(path, 'r+b') as file:
            file.write(other)
            file.truncate()

    def scores(name):
        out = tmp_path / f'{name}.pkl'
        test_tool.main([TINY, str(path), '--work-dir', str(tmp_path / name),
                        '--out', str(out), '--cfg-options',
                        'log_level=WARNING',
                        f'experiment_name=in_place_{name}'])
        with open(out, 'rb') as file:
            return torch.stack([p['pred_score'] for p in pickle.load(file)])

    checked = scores('checked')
    load = torch.load
    with monkeypatch.context() as patch:  # between the read and the load
        patch.setattr(torch, 'load', lambda *a, **k: overwrite() or load(
            *a, **k))
        assert torch.equal(scores('after_read'), checked)

    shutil.copy(trained, path)
    fstat, stats = os.fstat, []

    def overwritten_while_read(fd):
        stat = fstat(fd)
        if os.readlink(f'/proc/self/fd/{fd}') == str(path) and not stats:
            stats.append(stat)
            overwrite()
        return stat

    monkeypatch.setattr(os, 'fstat', overwritten_while_read)
    with pytest.raises(CheckpointError) as info:
        scores('while_read')
    assert str(info.value).startswith(
        f'Checkpoint {path} changed while it was read')


# --------------------------------------------- wrong model, wrong head
def test_test_tool_refuses_a_checkpoint_of_another_model(tmp_path):
    # LeCT v1's weights evaluated with the tiny ResNet's config.
    path = str(tmp_path / 'lect_v1.pth')
    lect_v1 = get_model(Config.fromfile(LECT_V1))
    torch.save({'state_dict': lect_v1.state_dict()}, path)
    with pytest.raises(CheckpointMismatchError) as info:
        test_tool.main([TINY, path, '--work-dir', str(tmp_path)])
    text = str(info.value)
    assert path in text
    assert 'missing key(s)' in text and 'unexpected key(s)' in text
    assert 'backbone.stages.0' in text  # LeCT's keys, the first few
    assert 'load_from_strict=False' in text


def test_test_tool_refuses_a_checkpoint_with_another_head(trained,
                                                          tmp_path):
    with pytest.raises(CheckpointMismatchError) as info:
        test_tool.main([TINY, trained, '--work-dir', str(tmp_path),
                        '--cfg-options', *head_of_100('test_dataloader')])
    assert ('head.fc.weight: [10, 8] in the checkpoint, [100, 8] in the '
            'model') in str(info.value)


def test_load_from_another_head_fails_and_the_opt_out_fine_tunes(
        trained, tmp_path):
    # A name of its own: mmengine keys its loggers by experiment name (the
    # start time by default), so two runs started in one second in one
    # process would share the first one's log file.
    args = [TINY, '--work-dir', str(tmp_path), '--no-validate',
            '--cfg-options', *FAST, f'experiment_name={tmp_path.name}',
            f'load_from={trained}', *head_of_100('train_dataloader')]
    with pytest.raises(CheckpointMismatchError, match='load_from_strict'):
        train_tool.main(args)
    runner = train_tool.main(args + ['load_from_strict=False'])
    assert runner.epoch == 1
    assert 'does not fit the model' in log_text(str(tmp_path))


# ------------------------------------------------------------- --resume
def test_resume_with_nothing_to_resume_says_so(tmp_path):
    work_dir = str(tmp_path)
    runner = train_tool.main([TINY, '--work-dir', work_dir, '--resume',
                              '--no-validate', '--cfg-options', *FAST,
                              f'experiment_name={tmp_path.name}'])
    assert runner.epoch == 1
    assert (f'--resume: nothing to resume in {work_dir}'
            in log_text(work_dir))
    assert 'training starts from scratch' in log_text(work_dir)


def test_resume_from_a_path_that_does_not_exist(tmp_path):
    path = str(tmp_path / 'epoch_9.pth')
    with pytest.raises(CheckpointNotFoundError, match=f'--resume {path}'):
        train_tool.main([TINY, '--work-dir', str(tmp_path), '--resume', path,
                         '--cfg-options', *FAST])


def test_resume_on_a_damaged_latest_checkpoint(trained, tmp_path,
                                               largest_tensor_record):
    work_dir = tmp_path / 'run'
    work_dir.mkdir()
    intact = str(work_dir / 'epoch_1.pth')
    shutil.copy(trained, intact)
    latest = _damaged(trained, work_dir / 'epoch_2.pth', 'truncated',
                      largest_tensor_record)
    (work_dir / 'last_checkpoint').write_text(latest)
    args = [TINY, '--work-dir', str(work_dir), '--no-validate',
            '--cfg-options', *FAST, 'train_cfg.max_epochs=2',
            f'experiment_name={tmp_path.name}']
    with pytest.raises(CheckpointError) as info:
        train_tool.main(args + ['--resume'])
    text = str(info.value)
    assert f'{latest} is truncated' in text
    assert f'The newest intact checkpoint is {intact}' in text
    assert '--resume-intact' in text
    # with the flag it takes the intact one and goes on.
    runner = train_tool.main(args + ['--resume-intact'])
    assert runner.epoch == 2
    assert f'Resuming from the newest intact checkpoint, {intact}' in \
        log_text(str(work_dir))
