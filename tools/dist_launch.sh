#!/usr/bin/env bash
# The torchrun launcher behind tools/dist_train.sh and tools/dist_test.sh.
#   tools/dist_launch.sh SCRIPT NGPUS [SCRIPT arguments]
# runs tools/SCRIPT (train.py or test.py) in NGPUS processes per node: GPUs
# (NCCL), or CPU processes (gloo) on a machine without CUDA. Multi-node: set
# NNODES, NODE_RANK, MASTER_ADDR, PORT.
set -e

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SCRIPT=$1
GPUS=$2
if [ ! -f "$ROOT/tools/$SCRIPT" ]; then
    echo "dist_launch.sh: SCRIPT must be a file in $ROOT/tools" \
         "(train.py or test.py), got '$SCRIPT'" >&2
    exit 2
fi
if ! [[ "$GPUS" =~ ^[1-9][0-9]*$ ]]; then
    echo "dist_launch.sh: NGPUS must be a positive integer, got '$GPUS'" >&2
    exit 2
fi
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}

# exec: a signal sent to this script's process (a scheduler's SIGTERM)
# reaches torchrun, which forwards it to every rank, and torchrun's exit
# status is the script's.
export PYTHONPATH="$ROOT":$PYTHONPATH
exec torchrun \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$ROOT/tools/$SCRIPT" \
    "${@:3}"
