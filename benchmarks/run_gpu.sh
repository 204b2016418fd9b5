#!/usr/bin/env bash
# Every GPU benchmark of benchmarks/ on one GPU (about 8 minutes on an H100
# within the default budget; see ONLY below for the rest).
#
#   OUT=work_dirs/bench_gpu bash benchmarks/run_gpu.sh
#
# Needs torch with CUDA plus mmpretrain/mmengine/mmcv-lite (and their
# imports: numpy, opencv, einops, rich, yaml; matplotlib for the PNGs) on
# PYTHONPATH, lect_mm importable from the repository root. Writes into $OUT:
#   benchmarks_gpu.md                     every table, in the order run
#   run_gpu.log                           stdout/stderr of every step
#   lemsa.png, resolution_{time,memory}_b{1,16}.png
# A copy without .git cannot name its commit: run it with
# LECT_MM_COMMIT=$(git rev-parse --short HEAD) exported from the checkout.
# Each step runs under `timeout`, within a global budget (BUDGET seconds,
# default 470), most important first; a step that fails or times out is
# logged and the next one runs. Partial results are still collected.
# The step limits add up to about 18 minutes: where one call may not run
# that long, split the run with ONLY, a bash regex on the step names:
#   ONLY='^0[1-4]' bash benchmarks/run_gpu.sh     # throughput, LeMSA
#   ONLY='^05' bash benchmarks/run_gpu.sh         # the 50k-image epochs
#   ONLY='^0[6-8]' bash benchmarks/run_gpu.sh     # resolution, inference,
#                                                 # compile
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-work_dirs/bench_gpu}
BUDGET=${BUDGET:-470}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
TMP=$(mktemp -d)
LOG="$OUT/run_gpu.log"
: > "$LOG"
START=$SECONDS

collect() {
  {
    echo "# lect_mm GPU benchmarks"
    echo
    echo "Produced by benchmarks/run_gpu.sh in $((SECONDS - START)) s."
    echo
    for d in "$TMP"/*/; do
      [ -d "$d" ] || continue
      for f in "$d"*.md; do
        [ -f "$f" ] && { cat "$f"; echo; }
      done
    done
  } > "$OUT/benchmarks_gpu.md"
  [ -f "$TMP/04_lemsa/lemsa.png" ] && cp "$TMP/04_lemsa/lemsa.png" "$OUT/"
  for b in 1 16; do
    for k in time memory; do
      f="$TMP/06_resolution_b$b/resolution_scaling_$k.png"
      [ -f "$f" ] && cp "$f" "$OUT/resolution_${k}_b$b.png"
    done
  done
  rm -rf "$TMP"
}
trap collect EXIT

# step NAME LIMIT_S SCRIPT ARGS...: run one benchmark into $TMP/NAME
step() {
  local name=$1 limit=$2 script=$3
  shift 3
  if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then
    return 0
  fi
  local left=$((BUDGET - (SECONDS - START)))
  if [ "$left" -lt 20 ]; then
    echo "!! $name skipped: budget spent" | tee -a "$LOG"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name (limit ${limit}s, t=$((SECONDS - START))s): $script $*" \
    | tee -a "$LOG"
  mkdir -p "$TMP/$name"
  timeout --kill-after=5 "$limit" \
    "$PY" "benchmarks/$script" --device cuda --out "$TMP/$name" "$@" \
    >> "$LOG" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] && echo "!! $name exited with $rc" | tee -a "$LOG"
  return 0
}

"$PY" - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib
for m in ('numpy', 'cv2', 'einops', 'rich', 'yaml', 'matplotlib',
          'mmengine', 'mmcv', 'mmpretrain', 'lect_mm'):
    try:
        mod = importlib.import_module(m)
        print(f'{m} {getattr(mod, "__version__", "")}')
    except Exception as err:
        print(f'!! {m}: {type(err).__name__}: {err}')
import torch
print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')
EOF

# model training throughput, all report models, batch 64, 224²: bf16 (the
# goal's setting) first
step 01_train_bf16_cl 60 train_throughput.py --amp --channels-last
step 02_train_fp32 60 train_throughput.py
# where LeCT's step time goes, and ResNet's: kernels per step, GPU busy
step 03_profile_lect 45 train_throughput.py --profile LeCT --amp --top 30
step 03b_profile_resnet 45 train_throughput.py --profile ResNet --amp --top 15
# LeCT v3 in fp32: 0.54x the reference layout's inference on an H100
# (docs/benchmarks/gpu.md), the one model slower than its reference
step 03c_profile_lect_v3 45 train_throughput.py --profile 'LeCT v3' --top 15
# LeMSA fused (SDPA) vs literal, per stage, fwd and fwd+bwd, fp32 and bf16
step 04_lemsa 60 lemsa.py
# one CIFAR-10 epoch (50k images), bf16: device resize, then CPU resize
# (--no-loader-pass: the loader alone is measured separately, see the
# README; a loader pass over 50k images would not fit the slot too)
step 05a_data_device 120 data_pipeline.py --modes device --amp \
  --num-workers 12 --images 50000 --no-loader-pass
step 05b_data_cpu 120 data_pipeline.py --modes cpu --amp \
  --num-workers 12 --images 50000 --no-loader-pass
# LeCT (pool_size / sr_ratio), CeiT (GAP), ViT at 224..896
step 06_resolution_b1 45 resolution_scaling.py --batch-size 1
step 06_resolution_b16 60 resolution_scaling.py --batch-size 16
# inference images/s, batch 1 and 64, fp32 and bf16
step 07_inference 60 inference.py
# lect_mm vs the reference-layout LeCT, same weights, in turns
step 07b_reference 60 reference.py
# torch.compile last: compilation time is the least predictable
step 08_train_bf16_compile 150 train_throughput.py --amp --compile \
  --models LeCT ResNet --warmup 3
# the same with CUDA graphs (mode reduce-overhead): one launch per graph
# instead of one per kernel, the host time the bf16 profile of LeCT showed
step 08b_train_bf16_cudagraphs 180 train_throughput.py --amp \
  --compile reduce-overhead --models LeCT ResNet --warmup 3
