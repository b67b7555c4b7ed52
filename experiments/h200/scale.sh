#!/usr/bin/env bash
# The paper's scale on one H200 (docs/results.md §4d), what the fifth run left open: the one target not yet met
# first (the 128 × 8 loop, and what the sampler's host-side choices save it), then the ladder's grid, smallest model
# first, and last the 1.5B shape at 4k with the log-softmax compiled (its MFU target is met without it):
#
#   loop-128x8-1024      SmolLM2 counting, 128 prompts × 8 samples × ≤ 768 tokens, as the fifth run's fast loop but
#                        with the update compiled, vLLM decoding all 1,024 responses at once with CUDA graphs
#                        captured up to 1,024 sequences (--vllm-max-num-seqs 1024), flat log-prob lists and
#                        Python's garbage collector paused while a batch is generated; a profiled fifth update
#   sampler-host         benchmarks/sampler_host.py on that loop's sampler: 1,024 responses of 768 tokens as the sampler
#                        now takes them (flat log-prob lists, Python's garbage collector paused), with the collector
#                        running, and with a log-prob dict per token
#   ladder-MODEL-N       benchmarks/scale_ladder.py: the shapes the ladder has not run yet, SmolLM2-135M, Qwen2.5-0.5B
#                        and Qwen2.5-3B, at N = 1k, 4k and 8k response tokens (the 1.5B shape's three lengths are in the
#                        third and fourth runs), gradient checkpointing, each cell at one micro-batch sized to its
#                        tokens (no failed attempt first)
#   ladder-4k-compiled   the 1.5B shape at 4k without checkpointing, --compile-layers (45.5% MFU in the fifth run),
#                        now with the chunked log-softmax compiled too, and its operator profile
#
# Usage on the device machine, repo root, with the bundle installed as ../shared/gpu/README.md says:
#   HF=<SmolLM2 HF folder> RUNS=<results folder> DEADLINE=<epoch seconds> bash experiments/h200/scale.sh
# (experiments/h200/install.sh sets the machine up; experiments/h200/report.sh watches the runs)
# Everything lands in $RUNS: each loop's folder and log, and each ladder's NAME.json and NAME.log.
set -uo pipefail
HF=${HF:?set HF to the SmolLM2 HF folder}
RUNS=${RUNS:?set RUNS to a results folder}
DEADLINE=${DEADLINE:?set DEADLINE to the epoch second by which everything must have stopped}
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
loop loop-128x8-1024 --prompts-per-step 128 --num-samples 8 --micro-batch-size 128 --micro-batch-tokens 53248 \
  --vllm-gpu-memory-utilization 0.5 --vllm-max-num-seqs 1024 --steps 5 --no-vllm-row-seeds --no-rescore \
  --compile-layers --profile-update 5
echo "$(date +%T) sampler-host" >> "$RUNS/phases.log"
timeout -k 20 "$(left)" python3 benchmarks/sampler_host.py --repeats 2 --output "$RUNS/sampler-host.json" -- --model "$HF" \
  --task counting --sampler vllm --device cuda --dtype fp16 --prompts-per-step 128 --num-samples 8 --max-new-tokens 768 \
  --vllm-gpu-memory-utilization 0.5 --vllm-max-num-seqs 1024 --no-vllm-row-seeds --no-vllm-enforce-eager \
  --wandb-mode disabled --output-dir "$RUNS/sampler-host" > "$RUNS/sampler-host.log" 2>&1
grid "smollm2-135m 1024 64" "smollm2-135m 4096 64" "smollm2-135m 8192 32" \
     "qwen2.5-0.5b 1024 64" "qwen2.5-0.5b 4096 32" "qwen2.5-0.5b 8192 16" \
     "qwen2.5-3b 1024 32" "qwen2.5-3b 4096 16" "qwen2.5-3b 8192 8"
ladder ladder-4k-compiled --models qwen2.5-1.5b --response-lengths 4096 --micro-batch-sizes 8 \
  --no-gradient-checkpointing --compile-layers --profile
echo "$(date +%T) done" >> "$RUNS/phases.log"
