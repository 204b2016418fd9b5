"""Run timm's own ``tests/test_models.py`` on lect_mm's timm models.

timm's model tests list every registered model; with ``TORCH_BACKEND`` naming
a module they import it first (``lect_mm.timm``, which registers the zoo).
This file is also the pytest plugin (``-p timm_test_suite``) that keeps only
the tests parametrised with a zoo model (``ZOO``). The table gives, per test
function and per model, the passed / failed / skipped counts; the exit status
is 0 when every failure is one of ``EXPECTED`` (test, models, what the
failure message says, reason; also in ``docs/timm.md``), 1 otherwise.

Example (``tests/`` of the installed timm release, from its source
distribution or ``git archive v1.0.31 tests``; never part of this project)::

    pip download timm==1.0.31 --no-deps --no-binary :all: -d /tmp/timm
    tar -xzf /tmp/timm/timm-1.0.31.tar.gz -C /tmp/timm
    python tools/misc/timm_test_suite.py /tmp/timm/timm-1.0.31/tests
"""
import argparse
import fnmatch
import os
import os.path as osp
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from typing import Dict, List, NamedTuple, Tuple

_NO_FX = ('lect_v*', 'ceit_*', 'vitae_*', 'cct_*', 'alternet18',
          'flexible_levit_*')
_FX = (r'TraceError|unknown to einops',
       "torch.fx cannot trace the backbones' forwards: they unpack and "
       "iterate over tensor shapes, branch on them and call einops "
       "(NarrowResNet, of mmpretrain's ResNet blocks, traces)")
#: The failures that are known and why: (test function, model globs, a
#: regular expression the failure message matches, reason). docs/timm.md
#: lists the same.
EXPECTED = [
    ('test_model_backward', ('vitae_*', ), r'No gradient for backbone\.',
     "ViTAE's Performer attention projects with fixed random features, a "
     'parameter with requires_grad=False as in the original ViTAE (in the '
     "state dict and the parameter count); it gets no gradient"),
    ('test_model_default_cfgs', ('ceit_ref', 'ceit_t'), r'IndexError',
     "CeiT with LCA pools with a class-token attention over every block's "
     'class token, which no (B, C, H, W) map carries: forward_features '
     'returns the pooled (B, C)'),
    ('test_model_forward_features', ('cct_2_3x2', ), r'assert 2 >= 3',
     'CCT-2 has 2 layers, so 2 feature levels; the test asks for 3'),
    ('test_model_forward_torchscript', ('*', ),
     r'is_init|NotSupportedError|UnsupportedNodeError',
     "TorchScript cannot compile mmengine's BaseModule (its is_init "
     'property), which every backbone and block is, nor their forwards '
     "(f-strings in errors, set comprehensions, mmpretrain ResNet's nested "
     'function)'),
    ('test_model_forward_fx', _NO_FX) + _FX,
    ('test_model_backward_fx', _NO_FX) + _FX,
    ('test_model_forward_fx_torchscript', _NO_FX) + _FX,
]


class Outcome(NamedTuple):
    test: str  #: the test function
    model: str  #: the model_name parameter
    outcome: str  #: 'passed', 'failed' or 'skipped'
    message: str  #: the failure's (or skip's) message


def pytest_configure(config):
    """Plugin: register the zoo before timm's tests list the models."""
    import lect_mm.timm  # noqa: F401


def pytest_collection_modifyitems(config, items):
    """Plugin: keep the tests parametrised with a zoo model."""
    from lect_mm.timm import ZOO
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, 'callspec', None), 'params', {})
        (keep if params.get('model_name') in ZOO else drop).append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


def parse_junit(path: str) -> List[Outcome]:
    """The outcomes of a pytest JUnit XML file, by test and model."""
    result = []
    for case in ET.parse(path).getroot().iter('testcase'):
        name = case.get('name')
        test, _, params = name.partition('[')
        # ids join the parameters with '-' (model names have none)
        model = '-'.join(p for p in params.rstrip(']').split('-')
                         if not p.isdigit())
        outcome, message = 'passed', ''
        for child in case:
            if child.tag in ('failure', 'error'):
                outcome = 'failed'
            elif child.tag == 'skipped':
                outcome = 'skipped'
            else:
                continue
            message = child.get('message') or child.text or ''
            break
        result.append(Outcome(test, model, outcome, message))
    return result


def expected_reason(outcome: Outcome, expected=EXPECTED) -> str:
    """The reason of the ``expected`` entry a failure matches ('' none)."""
    for test, models, pattern, reason in expected:
        if (outcome.test == test
                and any(fnmatch.fnmatch(outcome.model, m) for m in models)
                and re.search(pattern, outcome.message)):
            return reason
    return ''


def table(outcomes: List[Outcome], key) -> List[str]:
    """Markdown rows of passed / failed / skipped counts by ``key``."""
    counts: Dict[str, Counter] = defaultdict(Counter)
    for o in outcomes:
        counts[key(o)][o.outcome] += 1
        counts['total'][o.outcome] += 1
    rows = ['| | passed | failed | skipped |', '|---|---:|---:|---:|']
    for name in [k for k in counts if k != 'total'] + ['total']:
        c = counts[name]
        rows.append(f'| {name} | {c["passed"]} | {c["failed"]} | '
                    f'{c["skipped"]} |')
    return rows


def verdict(outcomes: List[Outcome], expected=EXPECTED) -> Tuple[int, list]:
    """Exit status (0: every failure expected) and the report lines: the
    expected failures by test and reason, each unexpected one."""
    if not outcomes:
        return 1, ['no test of a lect_mm model ran']
    known: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    lines = []
    for o in outcomes:
        if o.outcome != 'failed':
            continue
        reason = expected_reason(o, expected)
        if reason:
            known[(o.test, reason)].append(o.model)
        else:
            first = (o.message.strip().splitlines() or [''])[0][:160]
            lines.append(f'- UNEXPECTED: {o.test}[{o.model}]: {first}')
    lines[:0] = [f'- expected: {test} ({", ".join(models)}): {reason}'
                 for (test, reason), models in known.items()]
    unexpected = len(lines) - len(known)
    lines.append(f'\n{unexpected} unexpected failure(s)')
    return int(unexpected > 0), lines


def run(tests: str, junit: str, extra: List[str]) -> None:
    """timm's test_models.py in a fresh pytest process, this file its
    plugin, lect_mm.timm its TORCH_BACKEND; its report goes to ``junit``."""
    test_file = osp.join(tests, 'test_models.py')
    if not osp.isfile(test_file):
        raise SystemExit(f'{test_file} not found: pass the tests/ folder of '
                         "timm's source")
    env = dict(os.environ, TORCH_BACKEND='lect_mm.timm')
    env['PYTHONPATH'] = os.pathsep.join(
        p for p in (osp.dirname(osp.abspath(__file__)),
                    osp.dirname(osp.dirname(osp.dirname(
                        osp.abspath(__file__)))), env.get('PYTHONPATH'))
        if p)
    cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
           '-p', 'timm_test_suite', f'--junitxml={junit}',
           test_file, *extra]
    proc = subprocess.run(cmd, cwd=osp.dirname(osp.abspath(tests)), env=env,
                          capture_output=True, text=True)
    if not osp.isfile(junit):
        raise SystemExit('pytest wrote no report:\n' +
                         (proc.stdout + proc.stderr)[-3000:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('tests', help="timm's tests/ folder")
    parser.add_argument('--junit', help='read this JUnit XML file instead '
                        'of running the tests')
    parser.add_argument('pytest_args', nargs='*',
                        help='further pytest arguments (after --), e.g. '
                        '-k forward')
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        junit = args.junit or osp.join(tmp, 'timm.xml')
        if not args.junit:
            run(args.tests, junit, args.pytest_args)
        outcomes = parse_junit(junit)
    import timm
    print(f"timm {timm.__version__}'s tests/test_models.py on "
          f'{len({o.model for o in outcomes})} lect_mm models\n')
    print('\n'.join(table(outcomes, lambda o: o.test)), end='\n\n')
    print('\n'.join(table(outcomes, lambda o: o.model)), end='\n\n')
    status, lines = verdict(outcomes)
    print('\n'.join(lines))
    return status


if __name__ == '__main__':
    sys.exit(main())
