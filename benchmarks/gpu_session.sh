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
#   5a_cifar10_data   N_CIFAR train images (and 1/5 as many test images) as
#                     CIFAR-10's official python pickles (random pixels)
#   5b_epoch_lect_v1  one epoch of python tools/train.py
#                     configs/lect/lect_v1_cifar10.py --amp on them, changed
#                     only by --cfg-options (data root, verify_md5=False for
#                     the generated files, 1 epoch without validation,
#                     WORKERS loader workers); result: the epoch's seconds
#                     from the loop's start to its checkpoint
#   5c_short_last_batch  the same on 16 full batches and one of BATCH / 4
#                     images, every iteration's time logged: the first, the
#                     median and the last (the first at its batch size)
#   6_run_gpu         benchmarks/run_gpu.sh with what is left of the budget
# STEPS, a bash regex on these names, runs only the matching ones, e.g.
#   STEPS='^(5|6)' ONLY='^0[1-3]' ...   (ONLY: run_gpu.sh's own filter)
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
N_CIFAR=${N_CIFAR:-50000}
WORKERS=${WORKERS:-12}
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
  echo "- data (random pixels): STL10 binary layout, $N_TRAIN train /" \
    "$N_TEST test images (steps 1-3); CIFAR-10 pickles, $N_CIFAR train" \
    "images (step 5); batch $BATCH"
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
  if [ -n "${STEPS:-}" ] && ! [[ $name =~ $STEPS ]]; then
    return 0
  fi
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

CIFAR="$OUT/data/cifar10"
step 5a_cifar10_data 60 "ls $CIFAR/cifar-10-batches-py | tr '\n' ' '" -- \
  "$PY" - "$CIFAR" "$N_CIFAR" <<'PYEOF'
import os
import pickle
import sys

import numpy as np

root, num = sys.argv[1], int(sys.argv[2])
folder = os.path.join(root, 'cifar-10-batches-py')
os.makedirs(folder, exist_ok=True)
rng = np.random.default_rng(0)
# five training batches and one test batch of a fifth of the images each,
# as the official files (R, G, B planes of 32x32, row-major)
files = [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']
for name in files:
    rows = max(num // 5, 1)
    with open(os.path.join(folder, name), 'wb') as f:
        pickle.dump(dict(batch_label=name, labels=[i % 10 for i in range(rows)],
                         data=rng.integers(0, 256, (rows, 3072), np.uint8),
                         filenames=[f'{name}_{i}.png' for i in range(rows)]),
                    f, protocol=2)
with open(os.path.join(folder, 'batches.meta'), 'wb') as f:
    pickle.dump(dict(num_cases_per_batch=num // 5, num_vis=3072,
                     label_names=[f'class{i}' for i in range(10)]), f,
                protocol=2)
PYEOF

# what a run's mmengine log says of its training epoch (mmengine logs the
# iteration times of every LoggerHook interval; --cfg-options sets it):
#   epoch DIR       seconds from the loop's start ("Checkpoints will be saved
#                   to", logged before the first iteration) to the epoch's end
#                   ("Saving checkpoint", after its last iteration), and the
#                   last logged iteration and data times
#   iterations DIR  first, median and last logged iteration time, and the
#                   seconds from the last one to the checkpoint
train_log() {
  "$PY" - "$1" "$OUT/$2" <<'PYEOF'
import glob
import re
import statistics
import sys
from datetime import datetime

kind, folder = sys.argv[1:]
lines = open(sorted(glob.glob(folder + '/*/*.log'))[-1]).readlines()
train = [x for x in lines if 'Epoch(train)' in x]
def stamp(line):
    return datetime.strptime(line[:19], '%Y/%m/%d %H:%M:%S')
def value(key, line):
    return float(re.search(rf'\b{key}: ([0-9.]+)', line).group(1))
end = next(stamp(x) for x in lines if 'Saving checkpoint' in x)
if kind == 'epoch':
    start = next(stamp(x) for x in lines if 'Checkpoints will be saved' in x)
    total = re.search(r'\[\d+/(\d+)\]', train[-1].split('Epoch(train)')[1])
    print(f'{(end - start).total_seconds():.0f} s for {total.group(1)} '
          f'iterations; last logged: time {value("time", train[-1])} '
          f's/iter, data_time {value("data_time", train[-1])} s')
else:
    times = [value('time', x) for x in train]
    print(f'{len(times)} iterations: first {times[0]:.3f} s, median '
          f'{statistics.median(times[1:-1]):.3f} s, last (short batch) '
          f'{times[-1]:.3f} s; last to checkpoint '
          f'{(end - stamp(train[-1])).total_seconds():.0f} s')
PYEOF
}
# the --cfg-options of LeCT v1 --amp on 5a's files: the data root,
# verify_md5=False for the generated files, 1 epoch, no validation
CIFAR_EPOCH=(train_dataloader.dataset.data_root="$CIFAR"
  val_dataloader.dataset.data_root="$CIFAR"
  test_dataloader.dataset.data_root="$CIFAR"
  train_dataloader.dataset.verify_md5=False
  val_dataloader.dataset.verify_md5=False
  test_dataloader.dataset.verify_md5=False
  train_dataloader.batch_size="$BATCH"
  train_dataloader.num_workers="$WORKERS"
  train_cfg.max_epochs=1 train_cfg.val_begin=2)
step 5b_epoch_lect_v1 240 "train_log epoch epoch_lect_v1" -- \
  "$PY" tools/train.py configs/lect/lect_v1_cifar10.py --amp \
  --work-dir "$OUT/epoch_lect_v1" --cfg-options "${CIFAR_EPOCH[@]}"
# the iteration times of an epoch that ends in a short batch: is its last
# iteration, the first at that batch size, the slow end of step 5b? The
# first 16 full batches of 5a's files and one batch of a quarter, each
# iteration's own time logged (window 1)
step 5c_short_last_batch 90 "train_log iterations epoch_tail" -- \
  "$PY" tools/train.py configs/lect/lect_v1_cifar10.py --amp \
  --work-dir "$OUT/epoch_tail" --cfg-options "${CIFAR_EPOCH[@]}" \
  train_dataloader.dataset.indices=$((16 * BATCH + (BATCH + 3) / 4)) \
  default_hooks.logger.interval=1 log_processor.window_size=1

left=$((BUDGET - (SECONDS - START)))
if [ "$left" -gt 60 ] && [ "${SKIP_RUN_GPU:-0}" != 1 ] \
    && { [ -z "${STEPS:-}" ] || [[ 6_run_gpu =~ $STEPS ]]; }; then
  step 6_run_gpu "$left" "echo \"tables: $OUT/bench/benchmarks_gpu.md\"" -- \
    env OUT="$OUT/bench" BUDGET=$((left - 20)) PYTHON="$PY" \
    bash benchmarks/run_gpu.sh
fi
echo >> "$REPORT"
echo "Total: $((SECONDS - START)) s." >> "$REPORT"
cat "$REPORT"
