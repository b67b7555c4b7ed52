#!/usr/bin/env bash
# The paper's scale on one H200 (docs/results.md §4d): SmolLM2's RL loop with the co-located vLLM
# (sleep mode, weights pushed from the learner's GPU tensors), then the scale ladder.
#
#   sync         benchmarks/weight_sync.py: each part of SmolLM2's weight sync (export, push, sleep, wake),
#                and whether the sampler loads pushes directly (then also the push through vLLM's reload)
#   ladder-8k    benchmarks/scale_ladder.py: does the 1.5B shape run RL steps with 8k-token responses?
#   ladder-4k    and with 4k-token responses (and its MFU)?
#   loop-8x4     SmolLM2 counting, 8 prompts × 4 samples × ≤ 768 tokens, GRPO fp16, 20 steps: the
#                command of the reference single arm (before: ~3.0 s a step, ~20% in neither sampling
#                nor updating), for the before/after; vLLM's KV cache sized to the step (2 GiB), then
#                loop-8x4-util again with the cache vLLM's utilization leaves (~40 GiB), on the same host
#   ladder-ratio the fp16/bf16 step-time ratio of the 1.5B shape at 1k tokens (alternating)
#   loop-128x8-tuned  the same loop at 128 prompts × 8 samples, 5 steps, vLLM decoding at most 512
#                sequences at once (its CUDA graphs cover up to 512) and the learner packing rows of
#                similar length; everything stops at $DEADLINE
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

echo "$(date +%T) sync" >> "$RUNS/phases.log"
timeout -k 20 300 python3 benchmarks/weight_sync.py --output "$RUNS/sync.json" -- --model "$HF" --task counting --sampler vllm \
  --learner deepspeed --zero-stage 1 --device cuda --dtype fp16 --max-new-tokens 768 --vllm-kv-cache-gb 2 \
  --no-vllm-enforce-eager --output-dir "$RUNS/sync" > "$RUNS/sync.log" 2>&1
# The most uncertain cells next: does the 1.5B shape run RL steps at 8k and 4k tokens? Each at the
# micro-batch the previous run found to fit, so that no failed attempt's memory is in the picture.
ladder ladder-8k --response-lengths 8192 --micro-batch-sizes 8 --ratio-repeats 0 --cell-timeout-s 480
ladder ladder-4k --response-lengths 4096 --micro-batch-sizes 16 --ratio-repeats 0 --cell-timeout-s 360
# SmolLM2's KV cache takes 23,040 bytes a token: 8 × 4 × (≤ 512 + 768) tokens need 0.9 GiB.
loop loop-8x4 --prompts-per-step 8 --num-samples 4 --micro-batch-size 8 --vllm-gpu-memory-utilization 0.3 --steps 20 \
  --vllm-kv-cache-gb 2
loop loop-8x4-util --prompts-per-step 8 --num-samples 4 --micro-batch-size 8 --vllm-gpu-memory-utilization 0.3 --steps 20
# The fp16/bf16 step-time ratio of the 1.5B shape at 1k tokens: three cells of each dtype, alternating.
ladder ladder-ratio --response-lengths --micro-batch-sizes 32
# 128 × 8 × (≤ 512 + 768) tokens would need 28 GiB; the utilization leaves vLLM ~65 GiB.
loop loop-128x8-tuned --prompts-per-step 128 --num-samples 8 --micro-batch-size 128 --micro-batch-tokens 53248 \
  --vllm-gpu-memory-utilization 0.5 --steps 5 --vllm-max-num-seqs 512
echo "$(date +%T) done" >> "$RUNS/phases.log"
