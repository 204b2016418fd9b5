#!/usr/bin/env bash
# Install lect_mm NON-editable into a fresh virtual environment and use it
# from a directory outside the checkout: the model names are registered,
# every name builds, and configs and tools come from lect_mm/.mim.
#
#   bash tools/misc/check_install.sh [--sdist] [--mim] [VENV_DIR]
#
#   --sdist   install from a source distribution built from the checkout
#             (checks MANIFEST.in) instead of from the checkout itself
#   --mim     also install openmim and run `mim train lect_mm` on the
#             embedded digits demo for one epoch
#   VENV_DIR  a new folder (default: a fresh one under $TMPDIR); it is left
#             in place afterwards
#
# Takes minutes (pip installs torch and the rest of requirements.txt).
set -euo pipefail

SDIST=0
MIM=0
VENV=
for arg in "$@"; do
    case "$arg" in
        --sdist) SDIST=1 ;;
        --mim) MIM=1 ;;
        -*) echo "unknown option $arg" >&2; exit 2 ;;
        *) VENV=$arg ;;
    esac
done
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${VENV:-$(mktemp -d "${TMPDIR:-/tmp}/lect_mm_venv.XXXXXX")}
if [ -e "$VENV/bin/python" ]; then
    echo "$VENV already holds a virtual environment; give a new folder" >&2
    exit 2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lect_mm_check.XXXXXX")
PY="$VENV/bin/python"

step() { echo "== $* ($(date +%T))"; }

step "fresh venv in $VENV"
"${PYTHON:-python3}" -m venv "$VENV"
step "pip install -r requirements.txt"
"$PY" -m pip install -q -r "$REPO/requirements.txt"
if [ "$SDIST" = 1 ]; then
    step "sdist, then pip install lect_mm-*.tar.gz"
    (cd "$REPO" && "$PY" setup.py -q sdist -d "$WORK/dist" >/dev/null)
    # the sdist build leaves lect_mm.egg-info in the checkout (git-ignored)
    "$PY" -m pip install -q "$WORK"/dist/lect_mm-*.tar.gz
else
    step "pip install $REPO (non-editable)"
    "$PY" -m pip install -q "$REPO"
fi

cd "$WORK"  # away from the checkout: nothing is found through the cwd
step "use it from $WORK"
"$PY" - <<'PYEOF'
import time
from pathlib import Path

import mmpretrain
from mmengine.config import Config
from modelindex.load_model_index import load

import lect_mm
from lect_mm.model_index import mim_root

package = Path(lect_mm.__file__).parent
assert 'site-packages' in package.parts, package
assert mim_root() == package / '.mim', mim_root()
print('lect_mm', lect_mm.__version__, 'from', package)

print("mmpretrain.list_models('lect*') =", mmpretrain.list_models('lect*'))
names = [m.name for m in load(str(mim_root() / 'model-index.yml')).models]
assert set(names) <= set(mmpretrain.list_models())
print(len(names), 'lect_mm names in all, each listed by list_models()')

model = mmpretrain.get_model('lect-v3_stl10')
print("get_model('lect-v3_stl10'):", type(model).__name__,
      type(model.backbone).__name__,
      sum(p.numel() for p in model.parameters()), 'parameters, config',
      model._config.filename)

start = time.perf_counter()
for name in names:
    mmpretrain.get_model(name)
print(f'get_model built all {len(names)} names in '
      f'{time.perf_counter() - start:.1f} s')

cfg = Config.fromfile(str(mim_root() / 'configs/lect/lect_v3_stl10.py'))
assert cfg.model.backbone.type == 'LeCT'
for tool in ('train.py', 'test.py', 'dist_train.sh'):
    assert (mim_root() / 'tools' / tool).is_file(), tool
print('configs and tools found in', mim_root())
PYEOF

if [ "$MIM" = 1 ]; then
    step "pip install openmim"
    "$PY" -m pip install -q openmim
    step "mim train lect_mm configs/demo/lect_digits.py (1 epoch)"
    PATH="$VENV/bin:$PATH" mim train lect_mm configs/demo/lect_digits.py \
        --work-dir "$WORK/mim_run" \
        --cfg-options train_cfg.max_epochs=1 train_dataloader.num_workers=0 \
        val_dataloader.num_workers=0 \
        train_dataloader.persistent_workers=False \
        val_dataloader.persistent_workers=False
    ls "$WORK/mim_run"
fi
step "all checks passed"
