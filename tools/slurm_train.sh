#!/usr/bin/env bash
# Training on a SLURM cluster, one task per GPU (mmpretrain's script).
#   [GPUS=8] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [tools/train.py arguments]
# srun starts the tasks itself (--launcher slurm, no torchrun): SLURM's
# signals reach every rank, and the script's exit status is srun's, 75 when
# SIGTERM or SIGUSR1 stopped the training after writing its checkpoint (then
# add --resume; docs/cluster.md has a requeue example).
set -e

if [ $# -lt 4 ]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG WORK_DIR [tools/train.py arguments]" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}

export PYTHONPATH="$ROOT":$PYTHONPATH
# shellcheck disable=SC2086  # SRUN_ARGS holds several arguments
exec srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS} \
    python -u "$ROOT/tools/train.py" "$CONFIG" --work-dir="$WORK_DIR" \
    --launcher=slurm "${@:5}"
