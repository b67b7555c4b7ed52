#!/usr/bin/env bash
# The paper's scale on one H200 (docs/results.md §4d), what the seventh run left open: the ladder's grid cells of the
# 3B shape, an operator profile of each dtype's update where fp16's learner took 1.031x bf16's, then the 1.5B shape at
# 4k with the log-softmax compiled (its MFU target is met without it):
#
#   ladder-MODEL-N       benchmarks/scale_ladder.py: the cells the ladder has not run yet, Qwen2.5-3B at N = 1k, 4k and
#                        8k response tokens (the other shapes' cells are in the third, fourth, sixth and seventh runs),
#                        gradient checkpointing, each cell at one micro-batch sized to its tokens (no failed attempt first)
#   ladder-1k-profile-D  the 1.5B shape at 1k as in the ratio's cells, in D = fp16 and bf16, each with its update's
#                        operators (which kernels make fp16's learner 3% slower, in rescoring as much as in the update)
#   ladder-4k-compiled   the 1.5B shape at 4k without checkpointing, --compile-layers (45.5% MFU in the fifth run),
#                        now with the chunked log-softmax compiled too, and its operator profile
#
# Usage on the device machine, repo root, with the bundle installed as ../shared/gpu/README.md says:
#   RUNS=<results folder> DEADLINE=<epoch seconds> bash experiments/h200/scale.sh
# (experiments/h200/install.sh sets the machine up; experiments/h200/report.sh watches the runs)
# Everything lands in $RUNS: each ladder's NAME.json and NAME.log.
set -uo pipefail
RUNS=${RUNS:?set RUNS to a results folder}
DEADLINE=${DEADLINE:?set DEADLINE to the epoch second by which everything must have stopped}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
left() { echo $((DEADLINE - $(date +%s))); }

ladder() {  # NAME, then the ladder flags that differ
  local name=$1; shift
  echo "$(date +%T) $name" >> "$RUNS/phases.log"
  python3 benchmarks/scale_ladder.py --time-limit-s "$(( $(left) - 30 ))" --ratio-repeats 0 \
    --model-cache "${MODELS:-$HOME/ladder-models}" --output "$RUNS/$name.json" "$@" > "$RUNS/$name.log" 2>&1
}

# Micro-batches: the 1.5B shape peaked at 42 GiB with 8 × 8,320 tokens; the smaller shapes keep far less a token,
# and the 3B shape holds 43 GiB of ZeRO-1 state (14 bytes a parameter) before its activations.
grid() {  # "MODEL LENGTH MICRO-BATCH" …
  local cell model length micro
  for cell in "$@"; do
    read -r model length micro <<< "$cell"
    ladder "ladder-$model-$length" --models "$model" --response-lengths "$length" --micro-batch-sizes "$micro"
  done
}
grid "qwen2.5-3b 1024 32" "qwen2.5-3b 4096 16" "qwen2.5-3b 8192 8"
for dtype in fp16 bf16; do
  ladder "ladder-1k-profile-$dtype" --models qwen2.5-1.5b --response-lengths 1024 --micro-batch-sizes 32 \
    --dtype "$dtype" --profile
done
ladder ladder-4k-compiled --models qwen2.5-1.5b --response-lengths 4096 --micro-batch-sizes 8 \
  --no-gradient-checkpointing --compile-layers --profile
echo "$(date +%T) done" >> "$RUNS/phases.log"
