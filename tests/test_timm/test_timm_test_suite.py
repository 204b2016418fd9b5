"""tools/misc/timm_test_suite.py: which of timm's tests it keeps, how it
reads their report and when it calls the run a failure (timm's tests
themselves are not run here: they need its source and minutes)."""
import fnmatch
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from lect_mm.timm import ZOO

TOOL = 'tools/misc/timm_test_suite.py'
REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.test_models" name="test_model_forward[1-lect_v1]"/>
<testcase classname="tests.test_models" name="test_model_backward[2-vitae_t]">
<failure message="AssertionError: No gradient for backbone.stages.0.rc.attn.w">
trace</failure></testcase>
<testcase classname="tests.test_models" name="test_model_forward[1-ceit_t]">
<skipped message="Fixed input size model &gt; limit."/></testcase>
<testcase classname="tests.test_models" name="test_model_backward[2-lect_v1]">
{lect}</testcase>
</testsuite></testsuites>
"""


@pytest.fixture
def tool(load_script):
    return load_script(TOOL)


def _report(tmp_path, lect_v1_backward=''):
    path = tmp_path / 'report.xml'
    path.write_text(REPORT.format(lect=lect_v1_backward))
    return str(path)


def test_verdict_names_only_the_expected_failures(tool, tmp_path, capsys):
    outcomes = tool.parse_junit(_report(tmp_path))
    assert [(o.test, o.model, o.outcome) for o in outcomes] == [
        ('test_model_forward', 'lect_v1', 'passed'),
        ('test_model_backward', 'vitae_t', 'failed'),
        ('test_model_forward', 'ceit_t', 'skipped'),
        ('test_model_backward', 'lect_v1', 'passed')]
    assert tool.main(['unused', '--junit', _report(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert '| test_model_forward | 1 | 0 | 1 |' in out
    assert '| vitae_t | 0 | 1 | 0 |' in out and '| total | 2 | 1 | 1 |' in out
    assert '- expected: test_model_backward (vitae_t): ViTAE' in out

    # a failure of a model (or for a reason) the table does not name
    failed = _report(tmp_path, '<error message="RuntimeError: boom"/>')
    assert tool.main(['unused', '--junit', failed]) == 1
    assert ('UNEXPECTED: test_model_backward[lect_v1]: RuntimeError: boom'
            in capsys.readouterr().out)
    other = tool.Outcome('test_model_backward', 'vitae_t', 'failed',
                         'RuntimeError: NaN')
    assert tool.expected_reason(other) == ''
    assert tool.verdict([])[0] == 1  # nothing ran: not a pass


def test_plugin_keeps_the_zoo_models(tool):
    items = [SimpleNamespace(callspec=SimpleNamespace(params=params))
             for params in (dict(model_name='lect_v1', batch_size=1),
                            dict(model_name='resnet18'), {})]
    items.append(SimpleNamespace())  # not parametrised
    deselected = []
    config = SimpleNamespace(hook=SimpleNamespace(
        pytest_deselected=lambda items: deselected.extend(items)))
    kept = list(items)
    tool.pytest_collection_modifyitems(config, kept)
    assert kept == items[:1] and deselected == items[1:]


def test_docs_list_every_expected_failure(tool):
    docs = (Path(__file__).parents[2] / 'docs' / 'timm.md').read_text()
    section = docs[docs.index("## timm's own tests"):]
    for test, models, _, _ in tool.EXPECTED:
        assert re.search(rf'`{test}`', section), test
        for m in models:  # each names a zoo model
            assert any(fnmatch.fnmatch(n, m) for n in ZOO), m
