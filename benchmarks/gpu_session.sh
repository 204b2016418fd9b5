#!/usr/bin/env bash
# LeCT v3's STL10 training command end to end on one machine, for a short
# GPU loan:
#
#   OUT=work_dirs/gpu_session bash benchmarks/gpu_session.sh
#
# Most important first, each step under `timeout` and within a global
# budget (BUDGET seconds, default 420); a step that fails or times out is
# logged and the next one runs. Writes into $OUT:
#   gpu_session.md    device, commit, each step's status, seconds and result
#   gpu_session.log   the steps' stdout/stderr
#   data/stl10/       STL10 in its official binary layout (random pixels)
#   train_{fp32,amp}/ tools/train.py work dirs (checkpoints, logs)
# Steps (as named in gpu_session.md):
#   1_stl10_data      N_TRAIN / N_TEST images in stl10_binary/*.bin
#   2_train_fp32/amp  python tools/train.py configs/lect/lect_v3_stl10.py,
#                     unchanged but for --cfg-options naming the data root
#                     and the length (1 epoch of N_TRAIN / BATCH iterations),
#                     then the same with --amp
#   3_test_fp32/amp   tools/test.py on each run's checkpoint
#   4_gpu_tests       the suite's tests that need CUDA
#                     (tests/test_engine/test_optim_wrapper.py)
#   5_run_gpu         benchmarks/run_gpu.sh with what is left of the budget
# Without CUDA it runs on the CPU (a check of the script itself: use small
# N_TRAIN, N_TEST and BATCH). Needs torch plus mmengine, mmcv-lite and
# mmpretrain (requirements/runtime.txt pins them).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-work_dirs/gpu_session}
BUDGET=${BUDGET:-420}
N_TRAIN=${N_TRAIN:-1280}
N_TEST=${N_TEST:-640}
BATCH=${BATCH:-64}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu_session.log"
REPORT="$OUT/gpu_session.md"
DATA="$OUT/data/stl10"
CONFIG=configs/lect/lect_v3_stl10.py
START=$SECONDS
: > "$LOG"
{
  echo "# lect_mm GPU session"
  echo
  echo "- commit: ${LECT_MM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null \
    || echo unknown)}"
  echo "- device: $($PY -c 'import torch; print(torch.cuda.get_device_name()
    if torch.cuda.is_available() else "CPU (no CUDA)")' 2>>"$LOG")"
  echo "- torch: $($PY -c 'import torch; print(torch.__version__)')"
  echo "- data: STL10 binary layout, $N_TRAIN train / $N_TEST test images" \
    "(random pixels), batch $BATCH"
  echo
  echo "| step | status | seconds | result |"
  echo "|---|---|---:|---|"
} > "$REPORT"

# a missing package fails every step: stop at once, before spending the loan
if ! "$PY" -c 'import lect_mm.models, mmpretrain' >> "$LOG" 2>&1; then
  echo "| 0_imports | failed: see gpu_session.log (a wheel missing?) | 0 | |" \
    >> "$REPORT"
  cat "$REPORT"
  exit 1
fi

# step NAME LIMIT_S RESULT_CMD -- CMD...: run CMD, then record a row whose
# result column is RESULT_CMD's output (on success)
step() {
  local name=$1 limit=$2 result=$3
  shift 4
  local left=$((BUDGET - (SECONDS - START)))
  if [ "$left" -le 10 ]; then
    echo "| $name | skipped (budget) | 0 | |" >> "$REPORT"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name ($(date +%T), limit ${limit}s): $*" >> "$LOG"
  local t0=$SECONDS status=ok
  timeout "$limit" "$@" >> "$LOG" 2>&1 || status="failed ($?)"
  local row=""
  [ "$status" = ok ] && row=$(eval "$result" 2>>"$LOG")
  echo "| $name | $status | $((SECONDS - t0)) | $row |" >> "$REPORT"
}

# the data root and the length: the only changes to the config
cfg_options() {
  echo "train_dataloader.dataset.data_root=$DATA" \
    "val_dataloader.dataset.data_root=$DATA" \
    "test_dataloader.dataset.data_root=$DATA" \
    "train_dataloader.batch_size=$BATCH train_cfg.max_epochs=1"
}

# the last line of mmengine's log with an iteration time, and the metric
last_train_line() {
  grep -h 'Epoch(train)' "$OUT/$1"/*/*.log | tail -1 | sed 's/.*Epoch/Epoch/'
}
test_metric() {
  grep -h 'Epoch(test)' "$OUT/$1"/*/*.log | tail -1 | sed 's/.*Epoch/Epoch/'
}

step 1_stl10_data 60 "ls $DATA/stl10_binary | tr '\n' ' '" -- \
  "$PY" - "$DATA" "$N_TRAIN" "$N_TEST" <<'PYEOF'
import os
import sys

import numpy as np

root, sizes = sys.argv[1], dict(train=int(sys.argv[2]), test=int(sys.argv[3]))
folder = os.path.join(root, 'stl10_binary')
os.makedirs(folder, exist_ok=True)
rng = np.random.default_rng(0)
for split, num in sizes.items():
    # 96x96x3 bytes per image, column-major as the official files
    rng.integers(0, 256, (num, 3 * 96 * 96), dtype=np.uint8).tofile(
        os.path.join(folder, f'{split}_X.bin'))
    (np.arange(num) % 10 + 1).astype(np.uint8).tofile(
        os.path.join(folder, f'{split}_y.bin'))
PYEOF

for mode in fp32 amp; do
  amp=""
  [ "$mode" = amp ] && amp="--amp"
  # shellcheck disable=SC2046
  step "2_train_$mode" 150 "last_train_line train_$mode" -- \
    "$PY" tools/train.py "$CONFIG" --work-dir "$OUT/train_$mode" $amp \
    --cfg-options $(cfg_options)
done
for mode in fp32 amp; do
  amp=""
  [ "$mode" = amp ] && amp="--amp"
  # shellcheck disable=SC2046
  step "3_test_$mode" 60 "test_metric train_$mode" -- \
    "$PY" tools/test.py "$CONFIG" "$OUT/train_$mode/epoch_1.pth" \
    --work-dir "$OUT/train_$mode" $amp --cfg-options $(cfg_options)
done

step 4_gpu_tests 90 "grep -E '[0-9]+ (passed|failed|skipped)' \"$LOG\" | tail -1" -- \
  "$PY" -m pytest tests/test_engine/test_optim_wrapper.py -q -rs \
  -p no:cacheprovider

left=$((BUDGET - (SECONDS - START)))
if [ "$left" -gt 60 ] && [ "${SKIP_RUN_GPU:-0}" != 1 ]; then
  step 5_run_gpu "$left" "echo \"tables: $OUT/bench/benchmarks_gpu.md\"" -- \
    env OUT="$OUT/bench" BUDGET=$((left - 20)) PYTHON="$PY" \
    bash benchmarks/run_gpu.sh
fi
echo >> "$REPORT"
echo "Total: $((SECONDS - START)) s." >> "$REPORT"
cat "$REPORT"
