#!/usr/bin/env bash
# Run an experiment on ONE multi-GPU node: the runner (this process) prepares data and evaluates; each cell's
# training is launched as `torchrun --nproc_per_node=$NPROC -m goldfish train <cell>/train_config.yaml`.
#
#   NPROC=8 experiments/launch/torchrun.sh experiments/paper/llama2_7b_extreme.yaml [key=value ...] [--only GLOB]
#
# The dry run (layout, memory per GPU) runs first; a config that does not fit stops here.
set -euo pipefail
CONFIG=${1:?usage: NPROC=8 $0 CONFIG.yaml [key=value ...]}
shift
NPROC=${NPROC:-$(nvidia-smi -L 2>/dev/null | wc -l)}
NPROC=${NPROC:-1}
GOLDFISH=${GOLDFISH:-goldfish}          # e.g. GOLDFISH=.venv/bin/goldfish
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-0}   # set to 1 once the data is prepared: training never needs the hub

ARGS=(launcher=torchrun hardware.gpus="$NPROC" hardware.gpus_per_node="$NPROC")
"$GOLDFISH" experiment "$CONFIG" --dry-run "${ARGS[@]}" "$@"
exec "$GOLDFISH" experiment "$CONFIG" "${ARGS[@]}" "$@"
