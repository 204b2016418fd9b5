"""A wheel carries configs, tools and the model index in lect_mm/.mim, and
the sdist carries what the wheel build copies (tools/misc/check_install.sh
installs both ways into a fresh venv; too slow for the suite)."""
import subprocess
import sys
from pathlib import Path

from modelindex.load_model_index import load
from setuptools._distutils.filelist import FileList

from lect_mm.model_index import mim_root

REPO = Path(__file__).resolve().parents[1]


def _build_py(build_lib):
    """What a wheel build puts into its build folder (setup.py's build_py,
    which bdist_wheel runs; it writes nothing into the checkout)."""
    cmd = [sys.executable, 'setup.py', '-q', 'build_py', '-d', str(build_lib)]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True)


def test_wheel_build_ships_configs_tools_and_index(tmp_path):
    _build_py(tmp_path)
    package = tmp_path / 'lect_mm'
    mim = package / '.mim'
    assert (package / '__init__.py').is_file()
    assert (package / 'model_index.py').is_file()
    assert sorted(p.name for p in mim.iterdir()) == [
        'configs', 'model-index.yml', 'tools'
    ]
    for path in ('model-index.yml', 'configs/lect/lect_v3_stl10.py',
                 'configs/lect/metafile.yml',
                 'configs/_base_/models/lect_v3.py',
                 'configs/fashion_mnist/metafile.yml', 'tools/train.py',
                 'tools/test.py', 'tools/dist_train.sh',
                 'tools/model_converters/lect_ref2mmpretrain.py'):
        assert (mim / path).is_file(), path
    assert not list(mim.rglob('__pycache__'))
    # the installed package reads its own copy, not a checkout
    assert mim_root(package) == mim
    index = load(str(mim / 'model-index.yml'))
    assert len(index.models) > 60
    for model in index.models:
        assert (mim / model.config).is_file(), model.config


def test_sdist_manifest_carries_what_the_wheel_build_copies(monkeypatch):
    monkeypatch.chdir(REPO)  # sdist reads MANIFEST.in relative to the root
    files = FileList()
    files.findall()
    for line in (REPO / 'MANIFEST.in').read_text().splitlines():
        if line.strip() and not line.startswith('#'):
            files.process_template_line(line)
    shipped = {Path(f).as_posix() for f in files.files}
    tracked = {
        p.relative_to(REPO).as_posix()
        for d in ('configs', 'tools') for p in (REPO / d).rglob('*')
        if p.is_file() and '__pycache__' not in p.parts
    }
    assert tracked <= shipped
    assert 'model-index.yml' in shipped
    assert not any(f.endswith('.pyc') for f in shipped)
