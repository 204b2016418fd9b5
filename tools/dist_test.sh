#!/usr/bin/env bash
# Distributed testing on one or several machines with torchrun.
#   tools/dist_test.sh CONFIG CHECKPOINT NGPUS [tools/test.py arguments]
# NGPUS processes per node: GPUs (NCCL), or CPU processes (gloo) on a machine
# without CUDA. Multi-node: set NNODES, NODE_RANK, MASTER_ADDR, PORT
# (see tools/dist_launch.sh).
set -e

if [ $# -lt 3 ]; then
    echo "usage: $0 CONFIG CHECKPOINT NGPUS [tools/test.py arguments]" >&2
    exit 2
fi
CONFIG=$1
CHECKPOINT=$2
GPUS=$3

exec bash "$(dirname "$0")/dist_launch.sh" test.py "$GPUS" \
    "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
