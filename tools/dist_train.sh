#!/usr/bin/env bash
# Distributed training on one or several machines with torchrun.
#   tools/dist_train.sh CONFIG NGPUS [tools/train.py arguments]
# NGPUS processes per node: GPUs (NCCL), or CPU processes (gloo) on a machine
# without CUDA. Multi-node: set NNODES, NODE_RANK, MASTER_ADDR, PORT
# (see tools/dist_launch.sh).
set -e

if [ $# -lt 2 ]; then
    echo "usage: $0 CONFIG NGPUS [tools/train.py arguments]" >&2
    exit 2
fi
CONFIG=$1
GPUS=$2

exec bash "$(dirname "$0")/dist_launch.sh" train.py "$GPUS" \
    "$CONFIG" --launcher pytorch "${@:3}"
