"""The suite's own shortcuts (tests/conftest.py) change no result."""
import pytest


def test_a_config_file_is_read_again_when_it_or_a_base_changes(
        tmp_path, monkeypatch):
    # conftest reads each config file once per content: a changed base,
    # an environment variable and a missing file are seen, and each read
    # hands out a config of its own.
    from mmengine.config import Config
    base, leaf = tmp_path / 'base.py', tmp_path / 'leaf.py'
    base.write_text('a = 1\nb = dict(x=1)\n')
    leaf.write_text("_base_ = ['base.py']\nb = dict(y=2)\n")
    first = Config.fromfile(str(leaf))
    first.b.y = 3
    assert Config.fromfile(str(leaf)).to_dict() == dict(a=1, b=dict(x=1,
                                                                    y=2))
    base.write_text('a = 2\nb = dict(x=1)\n')  # same size, same second
    assert Config.fromfile(str(leaf)).a == 2

    env = tmp_path / 'env.py'
    env.write_text("_base_ = ['base.py']\nc = '{{$LECT_MM_TEST_C:0}}'\n")
    monkeypatch.setenv('LECT_MM_TEST_C', '3')
    assert Config.fromfile(str(env)).c == '3'
    monkeypatch.setenv('LECT_MM_TEST_C', '4')
    assert Config.fromfile(str(env)).c == '4'

    base.unlink()
    with pytest.raises(FileNotFoundError, match='base.py'):
        Config.fromfile(str(leaf))
