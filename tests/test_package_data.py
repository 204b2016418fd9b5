"""A wheel carries configs, tools and the model index in lect_mm/.mim, and
the sdist carries what the wheel build copies (tools/misc/check_install.sh
installs both ways into a fresh venv; too slow for the suite). In a checkout,
``pip install -e .`` links lect_mm/.mim to the checkout's files; no link
points at a folder that holds it, so copying or walking a clone terminates.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from modelindex.load_model_index import load
from setuptools.command.egg_info import FileList

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
    # setuptools' list, as its sdist uses it: each `graft` walks its own
    # folder, so lect_mm/.mim's links to configs/ and tools/ hide nothing
    files = FileList()
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
    assert not any(f.startswith('lect_mm/') for f in shipped)


# git-ignored outputs at the top of a checkout (data sets, runs, builds)
UNTRACKED = {'.git', 'data', 'work_dirs', 'build', 'dist', '.whl', '.venv',
             '.pytest_cache'}


def _ignore_untracked(folder, names):
    top = UNTRACKED if Path(folder) == REPO else set()
    return {n for n in names
            if n in top or n == '__pycache__' or n.endswith('.egg-info')}


def _links_to_ancestors(root: Path):
    """Links under ``root`` whose target holds the link itself (what makes
    ``copytree``, ``grep -R`` and ``find -L`` loop)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder, d) != root / '.git']
        for name in dirs + files:
            link = Path(folder, name)
            if link.is_symlink() and Path(folder).resolve().is_relative_to(
                    link.resolve()):
                found.append(link.relative_to(root).as_posix())
    return found


def _link_mim(checkout: Path):
    cmd = [sys.executable, 'setup.py', '-q', 'link_mim']
    subprocess.run(cmd, cwd=checkout, check=True, capture_output=True)


def test_checkout_holds_no_link_to_an_ancestor():
    assert _links_to_ancestors(REPO) == []


def test_a_copied_clone_links_its_own_mim_files(tmp_path):
    """A clone copies, then ``pip install -e .`` (its ``build_py``) links
    lect_mm/.mim to the copy's own files, whatever an older checkout left
    there: nothing, its link to the checkout or, on a file system without
    links, a text file (one clone, each in turn)."""
    clone = tmp_path / 'clone'
    shutil.copytree(REPO, clone, ignore=_ignore_untracked)
    mim = clone / 'lect_mm' / '.mim'
    for old in ('none', 'link', 'text'):
        if mim.is_symlink() or mim.is_file():
            mim.unlink()
        elif mim.is_dir():  # installed in editable mode, or the last turn
            shutil.rmtree(mim)
        if old == 'link':
            mim.symlink_to('..')
        elif old == 'text':
            mim.write_text('..')
        _link_mim(clone)
        assert sorted(p.name for p in mim.iterdir()) == [
            'configs', 'model-index.yml', 'tools'
        ], old
        for name in ('configs', 'model-index.yml', 'tools'):
            assert (mim / name).is_symlink(), (old, name)
            assert not os.path.isabs(os.readlink(mim / name)), (old, name)
            assert (mim / name).resolve() == (clone / name).resolve(), (
                old, name)
        assert (mim / 'configs' / 'lect' / 'lect_v1_cifar10.py').is_file()
        assert _links_to_ancestors(clone) == [], old
    # and the installed clone copies again, links followed or kept
    shutil.copytree(clone, tmp_path / 'copy')
    shutil.copytree(clone, tmp_path / 'copy_links', symlinks=True)
    copied = tmp_path / 'copy_links' / 'lect_mm' / '.mim' / 'configs'
    assert copied.resolve() == tmp_path / 'copy_links' / 'configs'


def test_lect_mm_prefix_finds_the_configs_from_outside(tmp_path, monkeypatch):
    """mmengine reads ``lect_mm::`` bases from ``<package>/.mim/configs``."""
    from mmengine.config import Config

    import lect_mm
    mim = Path(lect_mm.__file__).parent / '.mim'
    assert (mim / 'configs').is_dir(), (
        f'{mim} has no configs: run `pip install -e .` in the checkout (or '
        '`python setup.py link_mim` to use it through PYTHONPATH only)')
    (tmp_path / 'mine.py').write_text(
        "_base_ = 'lect_mm::lect/lect_v1_cifar10.py'\n"
        'train_cfg = dict(max_epochs=1)\n')
    monkeypatch.chdir(tmp_path)
    cfg = Config.fromfile('mine.py')
    assert cfg.model.backbone.type == 'LeCT'
    assert cfg.train_cfg.max_epochs == 1
    assert (mim / 'configs').resolve() == (mim_root() / 'configs').resolve()
