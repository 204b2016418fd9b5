"""tools/test.py on the work dir of a training writes into a folder of its
own, ``<work_dir>/<timestamp>/`` (log, metrics, config copy), and leaves
the training's config dump, logs and checkpoints as they were; two
evaluations started in the same second get two folders.

Before, the evaluation rewrote ``<work_dir>/<config>.py`` (its copy then
said ``load_from = <the checkpoint>``), and two evaluations started in the
same second shared one log folder and one metrics file."""
import hashlib
import json
import os
import os.path as osp
import time
import types

import mmengine.runner.runner as mmengine_runner
import pytest
from mmengine.config import Config

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(REPO, 'tests', 'test_engine', 'data', 'tiny_digits.py')


def _files(work_dir):
    """{relative path: SHA-256} of every file under ``work_dir``."""
    found = {}
    for root, _, files in os.walk(work_dir):
        for name in files:
            path = osp.join(root, name)
            with open(path, 'rb') as f:
                found[osp.relpath(path, work_dir)] = hashlib.sha256(
                    f.read()).hexdigest()
    return found


@pytest.fixture
def one_second(monkeypatch):
    """mmengine's Runner sees a clock stopped at one second (it names the
    log folder after it): what two evaluations started together see."""
    now = time.time()
    clock = types.SimpleNamespace(
        time=lambda: now, strftime=time.strftime, localtime=time.localtime)
    monkeypatch.setattr(mmengine_runner, 'time', clock)
    return time.strftime('%Y%m%d_%H%M%S', time.localtime(now))


def test_evaluations_leave_the_training_records_untouched(
        load_script, tmp_path, one_second):
    work_dir = tmp_path / 'work'
    load_script('tools/train.py').main([
        TINY, '--work-dir', str(work_dir), '--cfg-options',
        'train_cfg.max_epochs=1', 'train_dataloader.dataset.indices=16',
        'experiment_name=records_train'])
    training = _files(work_dir)
    assert training['tiny_digits.py'] and training[f'{one_second}/'
                                                   f'{one_second}.log']

    test = load_script('tools/test.py')
    checkpoint = str(work_dir / 'epoch_1.pth')
    metrics = [
        test.main([TINY, checkpoint, '--work-dir', str(work_dir),
                   '--cfg-options', 'experiment_name=records_test'])
        for _ in range(2)
    ]
    after = _files(work_dir)
    # nothing of the training changed: config dump, logs, checkpoints
    assert {k: after.get(k) for k in training} == training
    # each evaluation wrote into a folder of its own, the same second
    new = sorted(
        {path.split(os.sep)[0] for path in set(after) - set(training)})
    assert new == [f'{one_second}_1', f'{one_second}_2']
    for folder, result in zip(new, metrics):
        config = Config.fromfile(work_dir / folder / 'tiny_digits.py')
        assert config.load_from == checkpoint
        assert (work_dir / folder / f'{folder}.log').is_file()
        logged = json.loads((work_dir / folder / f'{folder}.json').read_text())
        assert logged['accuracy/top1'] == result['accuracy/top1']
    assert Config.fromfile(work_dir / 'tiny_digits.py').load_from is None
