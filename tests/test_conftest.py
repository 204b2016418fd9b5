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


def test_config_text_is_mmengines_and_text_that_is_no_python_raises():
    # conftest skips yapf's formatting of a config's text: the text is
    # mmengine's own unformatted one, it loads back to the same config,
    # and a value whose text is no Python raises mmengine's SyntaxError,
    # as yapf's parse makes it do.
    from mmengine.config import Config
    cfg = Config(dict(a=1, b=dict(c='x', d=[1, (2, 3)])))
    assert cfg.pretty_text == Config(
        cfg.to_dict(), format_python_code=False).pretty_text
    assert Config.fromstring(cfg.pretty_text, '.py').to_dict() == \
        cfg.to_dict()
    with pytest.raises(SyntaxError, match='Failed to format the config'):
        Config(dict(model=object)).pretty_text
