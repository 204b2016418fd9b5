"""tools/dist_train.sh and tools/dist_test.sh: one launcher
(tools/dist_launch.sh), the mmpretrain command lines, checked with a stand-in
torchrun that prints what it was given."""
import os
import os.path as osp
import re
import subprocess

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TOOLS = osp.join(REPO, 'tools')


@pytest.fixture
def fake_torchrun(tmp_path):
    (tmp_path / 'torchrun').write_text(
        '#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (tmp_path / 'torchrun').chmod(0o755)
    return dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
                PORT='1234')


def _run(script, *args, env=None):
    return subprocess.run(['bash', osp.join(TOOLS, script), *args],
                          env=env, capture_output=True, text=True,
                          timeout=60)


def _torchrun_args(tool, nproc):
    return ['--nnodes=1', '--node_rank=0', '--master_addr=127.0.0.1',
            f'--nproc_per_node={nproc}', '--master_port=1234',
            osp.join(TOOLS, tool)]


def test_dist_train_command_line(fake_torchrun):
    proc = _run('dist_train.sh', 'cfg.py', '2', '--work-dir', 'a b',
                env=fake_torchrun)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == _torchrun_args('train.py', 2) + [
        'cfg.py', '--launcher', 'pytorch', '--work-dir', 'a b']


def test_dist_test_command_line(fake_torchrun):
    proc = _run('dist_test.sh', 'cfg.py', 'ckpt.pth', '3', '--out', 'r.pkl',
                env=fake_torchrun)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == _torchrun_args('test.py', 3) + [
        'cfg.py', 'ckpt.pth', '--launcher', 'pytorch', '--out', 'r.pkl']


@pytest.mark.parametrize('script, args, message', [
    ('dist_train.sh', ['cfg.py'], 'usage: .*dist_train.sh CONFIG NGPUS'),
    ('dist_test.sh', ['cfg.py', '2'],
     'usage: .*dist_test.sh CONFIG CHECKPOINT NGPUS'),
    ('dist_train.sh', ['cfg.py', 'two'],
     "NGPUS must be a positive integer, got 'two'"),
    ('dist_test.sh', ['cfg.py', 'ckpt.pth', '0'],
     "NGPUS must be a positive integer, got '0'"),
    ('dist_launch.sh', ['nope.py', '1'],
     "SCRIPT must be a file in .*tools .*got 'nope.py'"),
])
def test_bad_arguments_fail_early(fake_torchrun, script, args, message):
    proc = _run(script, *args, env=fake_torchrun)
    assert proc.returncode == 2
    assert proc.stdout == ''  # torchrun never ran
    assert re.search(message, proc.stderr), proc.stderr
