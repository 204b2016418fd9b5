"""lect_mm's model names for mmpretrain's model hub.

The root ``model-index.yml`` imports each config family's ``metafile.yml``
(mmpretrain's format). :func:`register_model_index` hands it to mmpretrain's
:class:`~mmpretrain.apis.ModelHub`, after which ``mmpretrain.list_models``,
``get_model``, ``inference_model`` and the inferencers know every config by
its metafile name (``get_model('lect-v3_stl10')``). ``import lect_mm`` calls
it; it reads the YAML files only and builds no model.

The index, the configs and the tools live in one folder, :func:`mim_root`:
``lect_mm/.mim/`` in an installed wheel (copied there by ``setup.py``, the
way mmpretrain ships ``mmpretrain/.mim/``), or the repository root for a
source checkout or an editable install (whose ``lect_mm/.mim``, made by
``pip install -e .``, links to the root's files).
"""
import functools
from pathlib import Path
from typing import Dict, Set, Union

import yaml
from mmpretrain.apis import ModelHub

MODEL_INDEX = 'model-index.yml'

_registered: Set[Path] = set()


def _is_root(folder: Path) -> bool:
    # `configs/lect` as well as the index: a bare `configs/` folder next to
    # an installed package (site-packages) is not ours.
    return ((folder / MODEL_INDEX).is_file()
            and (folder / 'configs' / 'lect').is_dir())


def mim_root(package_dir: Union[str, Path, None] = None) -> Path:
    """The folder holding ``model-index.yml``, ``configs/`` and ``tools/``.

    Args:
        package_dir (str | Path, optional): The ``lect_mm`` package folder.
            Defaults to the one this module is imported from.

    Returns:
        Path: ``<package_dir>/.mim`` when it holds the index (an installed
        wheel), else the folder holding the checkout's index: an editable
        install, whose ``lect_mm/.mim`` links to the checkout's
        ``configs/``, ``tools/`` and ``model-index.yml``, or a checkout
        used through ``PYTHONPATH``, which may have no ``lect_mm/.mim``.

    Raises:
        FileNotFoundError: Neither folder holds the index and the configs.
    """
    package_dir = Path(package_dir or Path(__file__).parent).resolve()
    candidates = (package_dir / '.mim', package_dir.parent)
    for folder in candidates:
        if _is_root(folder):
            # in an editable install, .mim links to the checkout's files
            return (folder / MODEL_INDEX).resolve().parent
    raise FileNotFoundError(
        f'lect_mm finds no {MODEL_INDEX} with its configs/ in '
        f'{" or ".join(str(c) for c in candidates)}: install the package '
        'with `pip install .` (which copies them into lect_mm/.mim) or use '
        'it from a checkout of the repository')


def register_model_index(root: Union[str, Path, None] = None) -> None:
    """Register lect_mm's model names with mmpretrain's ``ModelHub``.

    Each name maps to a config under ``root``. A second call with the same
    root does nothing (mmpretrain itself would reject the names as
    duplicates).

    Args:
        root (str | Path, optional): A folder as returned by
            :func:`mim_root`. Defaults to :func:`mim_root`.
    """
    root = Path(root).resolve() if root is not None else mim_root()
    if root in _registered:
        return
    ModelHub.register_model_index(root / MODEL_INDEX, config_prefix=root)
    _registered.add(root)


@functools.lru_cache(maxsize=None)
def _index_entries(root: Path) -> Dict[str, dict]:
    # libyaml's parser where PyYAML has it: several times faster
    loader = getattr(yaml, 'CSafeLoader', yaml.SafeLoader)
    entries = {}
    index = yaml.load((root / MODEL_INDEX).read_text(), Loader=loader)
    for metafile in index['Import']:
        data = yaml.load((root / metafile).read_text(), Loader=loader)
        for model in data.get('Models', []):
            entries[model['Name']] = model
    return entries


def index_entry(name: str) -> dict:
    """The entry of model ``name`` in lect_mm's model index (its metafile's
    ``Name``, ``Weights``, ``Config``, ``Results``, ...), read from the YAML
    files only."""
    entries = _index_entries(mim_root())
    if name not in entries:
        raise KeyError(f'{name!r} is not in lect_mm\'s model index.')
    return entries[name]
