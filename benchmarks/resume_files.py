"""Which lect_mm files a real ``--resume`` runs while it loads its checkpoint.

``tools/train.py`` trains a config for one epoch, then ``--resume``s it for a
second one under ``sys.setprofile``: every Python call made between
``LectRunner.load_or_resume``'s call and its return is recorded, and the
lect_mm files whose code ran are printed (docs/architecture.md, "One
``--resume``"; issue 43 asks for at most 7)::

    python benchmarks/resume_files.py                    # the tiny config
    python benchmarks/resume_files.py --config configs/demo/lect_digits.py

``tests/test_tools/test_earlier_runs_cli.py`` measures a resume of its own with
:func:`files_run_by_load_or_resume`.
"""
import argparse
import os.path as osp
import sys
import tempfile
from contextlib import contextmanager

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
PACKAGE = osp.join(ROOT, 'lect_mm') + osp.sep
TINY = osp.join(ROOT, 'tests', 'test_engine', 'data', 'tiny_digits.py')
SHORT = ['train_dataloader.dataset.indices=64', 'log_level=WARNING',
         'val_dataloader.dataset.indices=32', 'train_dataloader.batch_size=16']


@contextmanager
def files_run_by_load_or_resume():
    """Record, in the yielded set, the lect_mm files (relative paths) whose
    code runs between the first call of a ``load_or_resume`` method defined
    in lect_mm and its return, in this thread (the profiler is off after
    that return: the rest of the run goes at full speed)."""
    files, depth = set(), [0]  # depth: load_or_resume frames open
    previous = sys.getprofile()

    def profile(frame, event, arg):
        if event not in ('call', 'return'):
            return
        code = frame.f_code
        opens = code.co_name == 'load_or_resume' and \
            code.co_filename.startswith(PACKAGE)
        if event == 'call':
            depth[0] += opens
        if depth[0] and code.co_filename.startswith(PACKAGE):
            files.add(osp.relpath(code.co_filename, ROOT))
        if event == 'return' and opens:
            depth[0] -= 1
            if not depth[0]:
                sys.setprofile(previous)

    sys.setprofile(profile)
    try:
        yield files
    finally:
        sys.setprofile(previous)


def main(argv=None) -> set:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--config', default=TINY)
    parser.add_argument('--work-dir', help='default: a temporary folder')
    args = parser.parse_args(argv)
    sys.path.insert(0, osp.join(ROOT, 'tools'))
    import train  # tools/train.py
    with tempfile.TemporaryDirectory() as tmp:
        work_dir = args.work_dir or tmp
        run = [args.config, '--work-dir', work_dir]
        train.main(run + ['--cfg-options', *SHORT, 'train_cfg.max_epochs=1'])
        with files_run_by_load_or_resume() as files:
            train.main(run + ['--resume', '--cfg-options', *SHORT,
                              'train_cfg.max_epochs=2'])
    print(f'{len(files)} lect_mm files run by load_or_resume:')
    for name in sorted(files):
        print(f'  {name}')
    return files


if __name__ == '__main__':
    main()
