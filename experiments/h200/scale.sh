#!/usr/bin/env bash
# The paper's scale on one H200 (docs/results.md §4d): every figure of the section's final tables, measured again with
# the code as it stands. About an hour on one H200 (each run's README says what its part took); everything stops by
# DEADLINE, and a cell the deadline stops is recorded as not measured.
#
#   loop-128x8          SmolLM2 counting, GRPO fp16, 128 prompts × 8 samples × ≤ 768 tokens, the settings that reached
#                       24.9k generated tok/s end to end: vLLM decoding all 1,024 responses at once with CUDA graphs
#                       captured up to 1,024 sequences, the update compiled, no separate rescoring pass
#   ladder-ratio        the fp16/bf16 step-time and learner-time ratios of the 1.5B shape at 1k tokens, three cells of
#                       each dtype alternating (also the grid's 1.5B cell at 1k: the median of its fp16 cells)
#   ladder-MODEL-N      benchmarks/scale_ladder.py: the grid's other cells, each shape at N = 1k, 4k and 8k response
#                       tokens, gradient checkpointing, each cell at one micro-batch sized to its tokens
#   ladder-4k-compiled  the 1.5B shape at 4k without checkpointing, --compile-layers, and its update's operators
#
# Usage on the H200 machine, repository root, after experiments/h200/install.sh:
#   HF=<SmolLM2 HF folder> RUNS=<results folder> DEADLINE=<epoch seconds> bash experiments/h200/scale.sh
#   python3 benchmarks/results/h200_scale/summarize.py <results folder>     # its tables
# (experiments/h200/install.sh sets the machine up; experiments/h200/report.sh watches the runs)
# Everything lands in $RUNS: the loop's folder and log, and each ladder's NAME.json and NAME.log.
set -uo pipefail
HF=${HF:?set HF to the SmolLM2 HF folder}
RUNS=${RUNS:?set RUNS to a results folder}
DEADLINE=${DEADLINE:?set DEADLINE to the epoch second by which everything must have stopped}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
source "$(dirname "${BASH_SOURCE[0]}")/phases.sh"
left() { echo $((DEADLINE - $(date +%s))); }

timed loop-128x8 "$(left)" python3 -m precision_oat.main --model "$HF" --task counting --sampler vllm --learner deepspeed \
  --zero-stage 1 --device cuda --algo grpo --dtype fp16 --seed 0 --max-new-tokens 768 --temperature 1.0 \
  --learning-rate 2e-5 --prompts-per-step 128 --num-samples 8 --steps 5 --micro-batch-size 128 \
  --micro-batch-tokens 53248 --vllm-gpu-memory-utilization 0.5 --vllm-max-num-seqs 1024 --no-vllm-enforce-eager \
  --no-vllm-row-seeds --no-rescore --compile-layers --probe-dtypes --save-every 1000 --log-every 1 \
  --wandb-mode disabled --output-dir "$RUNS/loop-128x8"

ladder() {  # NAME, then the ladder flags that differ
  local name=$1; shift
  phase "$name"
  python3 benchmarks/scale_ladder.py --time-limit-s "$(( $(left) - 30 ))" --ratio-repeats 0 \
    --model-cache "${MODELS:-$HOME/ladder-models}" --output "$RUNS/$name.json" "$@" > "$RUNS/$name.log" 2>&1
}
ladder ladder-ratio --response-lengths --micro-batch-sizes 32 --steps 3 --ratio-repeats 3

# Micro-batches: the largest of the ladder's sizes that each cell's tokens fit beside vLLM (the 3B shape holds 40 GiB
# of ZeRO-1 state before its activations).
for cell in "smollm2-135m 1024 64" "smollm2-135m 4096 64" "smollm2-135m 8192 32" \
            "qwen2.5-0.5b 1024 64" "qwen2.5-0.5b 4096 32" "qwen2.5-0.5b 8192 16" \
            "qwen2.5-1.5b 4096 16" "qwen2.5-1.5b 8192 8" \
            "qwen2.5-3b 1024 32" "qwen2.5-3b 4096 16" "qwen2.5-3b 8192 8"; do
  read -r model length micro <<< "$cell"
  ladder "ladder-$model-$length" --models "$model" --response-lengths "$length" --micro-batch-sizes "$micro"
done

ladder ladder-4k-compiled --models qwen2.5-1.5b --response-lengths 4096 --micro-batch-sizes 8 \
  --no-gradient-checkpointing --compile-layers --profile
phase "done"
