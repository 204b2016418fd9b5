"""Run mmengine's and mmpretrain's own test suites with and without
``import lect_mm`` and compare the outcomes test by test.

``import lect_mm`` must add components and change nothing else; the peers'
own tests are the widest check of that. Each suite (a folder holding the
peer's ``tests/`` at the release lect_mm pins, e.g. from ``git archive
v0.10.7 tests``) runs twice in a fresh pytest process: as it is, and with a
pytest plugin that imports lect_mm before collection. The table gives the
passed/failed/skipped/error counts of both runs and every test whose outcome
differs.

Example::

    git -C mmengine archive v0.10.7 tests | tar -x -C peers/mmengine
    git -C mmpretrain archive v1.2.0 tests | tar -x -C peers/mmpretrain
    python tools/misc/peer_test_suites.py peers/mmengine \\
        tests/test_config tests/test_registry tests/test_hooks
"""
import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from typing import Dict, List, Tuple

PLUGIN = 'import lect_mm  # noqa: F401\n'


def outcomes(junit_xml: str) -> Dict[str, str]:
    """``{test id: 'passed'|'failed'|'error'|'skipped'}`` of a JUnit file."""
    result = {}
    for case in ET.parse(junit_xml).getroot().iter('testcase'):
        name = f'{case.get("classname")}::{case.get("name")}'
        kinds = {child.tag for child in case}
        if 'error' in kinds:
            result[name] = 'error'
        elif 'failure' in kinds:
            result[name] = 'failed'
        elif 'skipped' in kinds:
            result[name] = 'skipped'
        else:
            result[name] = 'passed'
    return result


def run(root: str, paths: List[str], with_lect_mm: bool, workers: int,
        out: str) -> Dict[str, str]:
    """One pytest run of ``paths`` under ``root``; its outcomes."""
    env = dict(os.environ)
    cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
           '--continue-on-collection-errors',
           f'--junitxml={out}', *paths]
    if workers > 1:
        cmd += ['-n', str(workers)]
    if with_lect_mm:
        plugin_dir = tempfile.mkdtemp(prefix='lect_mm_plugin_')
        with open(os.path.join(plugin_dir, 'with_lect_mm.py'), 'w') as f:
            f.write(PLUGIN)
        env['PYTHONPATH'] = os.pathsep.join(
            [plugin_dir, env.get('PYTHONPATH', '')]).rstrip(os.pathsep)
        cmd[3:3] = ['-p', 'with_lect_mm']
    subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return outcomes(out)


def counts(result: Dict[str, str]) -> Tuple[int, int, int, int]:
    values = list(result.values())
    return tuple(values.count(k)
                 for k in ('passed', 'failed', 'skipped', 'error'))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('root', help='folder holding the peer\'s tests/')
    parser.add_argument('paths', nargs='+', help='test paths under root')
    parser.add_argument('--workers', type=int, default=1,
                        help='pytest-xdist workers (default 1)')
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    with tempfile.TemporaryDirectory() as tmp:
        plain = run(root, args.paths, False, args.workers,
                    os.path.join(tmp, 'plain.xml'))
        imported = run(root, args.paths, True, args.workers,
                       os.path.join(tmp, 'lect_mm.xml'))
    print(f'{root}: {" ".join(args.paths)}\n')
    print('| run | passed | failed | skipped | error |')
    print('|---|---:|---:|---:|---:|')
    for name, result in (('without lect_mm', plain),
                         ('with import lect_mm', imported)):
        print(f'| {name} | ' + ' | '.join(map(str, counts(result))) + ' |')
    differing = sorted(k for k in set(plain) | set(imported)
                       if plain.get(k) != imported.get(k))
    print(f'\n{len(differing)} test(s) with another outcome')
    for name in differing:
        print(f'- {name}: {plain.get(name)} -> {imported.get(name)}')
    return 1 if differing else 0


if __name__ == '__main__':
    sys.exit(main())
