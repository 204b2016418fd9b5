#!/usr/bin/env bash
# Distributed testing on one or several machines with torchrun.
#   tools/dist_test.sh CONFIG CHECKPOINT NGPUS [tools/test.py arguments]
# NGPUS processes per node: GPUs (NCCL), or CPU processes (gloo) on a machine
# without CUDA. Multi-node: set NNODES, NODE_RANK, MASTER_ADDR, PORT.
set -e

CONFIG=$1
CHECKPOINT=$2
GPUS=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

PYTHONPATH="$ROOT":$PYTHONPATH \
torchrun \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$ROOT/tools/test.py" \
    "$CONFIG" \
    "$CHECKPOINT" \
    --launcher pytorch "${@:4}"
