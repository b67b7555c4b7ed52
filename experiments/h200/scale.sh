#!/usr/bin/env bash
# The paper's scale on one H200 (docs/results.md §4d), what the third run left open:
#
#   loop-128x8-tuned         SmolLM2 counting, 128 prompts × 8 samples × ≤ 768 tokens, GRPO fp16, 4 steps, vLLM
#                            decoding at most 512 sequences at once (its CUDA graphs cover up to 512), the learner
#                            packing rows of similar length: end-to-end generated tokens/s (target ≥ 20k)
#   loop-128x8-fast          the same with --no-vllm-row-seeds (one seed for the batch: vLLM draws a decode step's
#                            noise in one kernel instead of one per sequence, which the sample time shows) and
#                            --no-rescore (π_old from the update's forward, which the score time shows), and a fifth
#                            step whose update is profiled (profile.json: where the learner's ~11 s a step go)
#   ladder-4k-no-ckpt        benchmarks/scale_ladder.py: the 1.5B shape at 4k tokens without gradient checkpointing,
#                            whose recomputation MFU does not count (29% with it; target ≥ 40%), and the operators
#                            one more update spends its device time in (--profile)
#   ladder-ratio             the fp16/bf16 step-time and learner-time ratios of the 1.5B shape at 1k tokens, three
#                            cells of each dtype alternating, until $DEADLINE (target ≤ 1.02)
#
# Usage on the device machine, repo root, with the bundle installed as ../shared/gpu/README.md says:
#   HF=<SmolLM2 HF folder> RUNS=<results folder> DEADLINE=<epoch seconds> bash experiments/h200/scale.sh
# (experiments/h200/install.sh sets the machine up; experiments/h200/report.sh watches the runs)
# Everything lands in $RUNS: each loop's folder and log, and each ladder's NAME.json and NAME.log.
set -uo pipefail
HF=${HF:?set HF to the SmolLM2 HF folder}
RUNS=${RUNS:?set RUNS to a results folder}
DEADLINE=${DEADLINE:?set DEADLINE to the epoch second by which everything must have stopped}
LADDER_MODELS=${LADDER_MODELS:-qwen2.5-1.5b}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
left() { echo $((DEADLINE - $(date +%s))); }

loop() {  # NAME, then the flags that differ
  local name=$1; shift
  echo "$(date +%T) $name" >> "$RUNS/phases.log"
  timeout -k 20 "$(left)" python3 -m precision_oat.main --model "$HF" --task counting --sampler vllm --learner deepspeed \
    --zero-stage 1 --device cuda --max-new-tokens 768 --temperature 1.0 --learning-rate 2e-5 --save-every 1000 \
    --no-vllm-enforce-eager --probe-dtypes --wandb-mode disabled --log-every 1 --algo grpo --dtype fp16 --seed 0 \
    --output-dir "$RUNS/$name" "$@" > "$RUNS/$name.log" 2>&1
}

ladder() {  # NAME, then the ladder flags that differ
  local name=$1; shift
  echo "$(date +%T) $name" >> "$RUNS/phases.log"
  # shellcheck disable=SC2086
  python3 benchmarks/scale_ladder.py --models $LADDER_MODELS --time-limit-s "$(( $(left) - 30 ))" \
    --model-cache "${MODELS:-$HOME/ladder-models}" --output "$RUNS/$name.json" "$@" > "$RUNS/$name.log" 2>&1
}

# 128 × 8 × (≤ 512 + 768) tokens would need 28 GiB; the utilization leaves vLLM ~65 GiB.
tuned=(--prompts-per-step 128 --num-samples 8 --micro-batch-size 128 --micro-batch-tokens 53248
       --vllm-gpu-memory-utilization 0.5 --vllm-max-num-seqs 512)
loop loop-128x8-tuned "${tuned[@]}" --steps 4
loop loop-128x8-fast "${tuned[@]}" --steps 5 --no-vllm-row-seeds --no-rescore --profile-update 5
# Activations of 8 × 4,224 tokens without recomputation: roughly 75 GiB, beside the learner's 24 GiB.
ladder ladder-4k-no-ckpt --response-lengths 4096 --micro-batch-sizes 8 4 --no-gradient-checkpointing \
  --ratio-repeats 0 --cell-timeout-s 420 --profile
ladder ladder-ratio --response-lengths --micro-batch-sizes 32 --steps 3
echo "$(date +%T) done" >> "$RUNS/phases.log"
