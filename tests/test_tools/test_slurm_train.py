"""tools/slurm_train.sh: mmpretrain's command line (srun starts the tasks,
tools/train.py --launcher slurm joins them), checked with a stand-in srun
that prints what it was given; the script's exit status is srun's (75 after
a training stopped by a signal)."""
import os
import os.path as osp
import subprocess

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SCRIPT = osp.join(REPO, 'tools', 'slurm_train.sh')


@pytest.fixture
def fake_srun(tmp_path):
    (tmp_path / 'srun').write_text(
        '#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n'
        'exit "${FAKE_STATUS:-0}"\n')
    (tmp_path / 'srun').chmod(0o755)
    return dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
                GPUS='4', GPUS_PER_NODE='2', SRUN_ARGS='--time=60 --qos=low')


def _run(*args, env):
    return subprocess.run(['bash', SCRIPT, *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_command_line(fake_srun):
    proc = _run('part', 'job', 'cfg.py', 'work dir', '--resume',
                env=fake_srun)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        '-p', 'part', '--job-name=job', '--gres=gpu:2', '--ntasks=4',
        '--ntasks-per-node=2', '--cpus-per-task=5', '--kill-on-bad-exit=1',
        '--time=60', '--qos=low', 'python', '-u',
        osp.join(REPO, 'tools', 'train.py'), 'cfg.py', '--work-dir=work dir',
        '--launcher=slurm', '--resume']


def test_exit_status_is_sruns(fake_srun):
    proc = _run('part', 'job', 'cfg.py', 'w',
                env=dict(fake_srun, FAKE_STATUS='75'))
    assert proc.returncode == 75


def test_missing_arguments_fail_early(fake_srun):
    proc = _run('part', 'job', 'cfg.py', env=fake_srun)
    assert proc.returncode == 2
    assert proc.stdout == ''  # srun never ran
    assert 'usage: ' in proc.stderr and 'PARTITION JOB_NAME CONFIG WORK_DIR' \
        in proc.stderr
