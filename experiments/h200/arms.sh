#!/usr/bin/env bash
# RL arms side by side on one H200: the paper's pair (vLLM sampler × DeepSpeed ZeRO-1) on the
# counting task with SmolLM2, the command of benchmarks/results/h200_round5 with the scale work's
# memory settings: vLLM sleeps during each update and its KV cache holds one evaluation (64 × 4 × ≤ 830
# tokens, 4.9 GiB for SmolLM2) rather than a share of the GPU (--vllm-kv-cache-gb 6),
# so the arms share the GPU's compute, not its memory.
#
#   ARMS   "NAME ALGO DTYPE SEED [FLAGS…]" entries separated by ";" (default: round 5's five arms); an arm's
#          own FLAGS come last, over EXTRA's (e.g. "grpo-tis-bf16-fp8 grpo-tis bf16 0 --sampler-dtype fp8")
#   STEPS  steps per arm (default 200; 150 for a named set, what two of its arms finish in a window)
#   EXTRA  flags added to every arm, after (so over) the ones below
#   THEN   a command to run once every arm has ended, in the background beside them (its output in
#          $RUNS/then.log), e.g. THEN='PARTS="speed lab-pair" bash experiments/h200/alone.sh'
#
# Three arms side by side took 4.3–4.8 s a step on an H200 (200 steps in 15–16 minutes,
# benchmarks/results/h200_round6); five take ~10 s. A GPU window leaves ~25 minutes after the set-up: three arms of
# 200 steps, or two of ~300.
#
# Named sets (SET=NAME in place of ARMS; the setting's flags come before EXTRA's, so EXTRA can override them):
#   long-pair      IS-PG fp16 against bf16 with answers of ~1,000–1,200 tokens at lr 5e-5 (docs/results.md §4c
#                  rounds 8–9, where bf16 broke): counts of 250–290 numbers, ≤ 1,280 new tokens, an evaluation of
#                  64 × 4 × ~2,600 tokens (~14 GiB of KV cache) at T = 1, the sampling the policy trains on;
#                  5.3–6.1 s a step for two arms side by side: 150 steps take ~15 minutes (one arm alone: 3.5 s a step)
#   and, at that setting, the precision atlas in training (docs/results.md §4f), two arms a window (three take 8.7 s a
#   step, too slow for 150 steps in one):
#   atlas-head-fp8 IS-PG bf16 with an fp32 head; FP8 rollouts (bf16 trainer) corrected by token TIS (GRPO-TIS)
#   atlas-masks    FP8 rollouts corrected by IcePop; FP8 rollouts with the geometric sequence mask
#   grpo           GRPO fp16 against bf16 (the paper's Fig. 1 asks each algorithm whether bf16 breaks)
#   grpo-tis       GRPO-TIS fp16 against bf16
#   gspo           GSPO fp16 against bf16
#   long           the arms of ARMS (named as above) at that setting, e.g. three a window on an H200, which finish their
#                  150 steps at ~8.5 s a step in ~21 minutes (benchmarks/results/h200_atlas_rl_4); an H100's 80 GB holds
#                  two, each ~30 GB while its vLLM is awake (benchmarks/results/h200_round10), and more are refused
# A set's arms are named ALGO-TRAINERDTYPE-REST (an FP8 arm's REST starts fp8), as arms_report.py reads them; SEED=N
# (default 0) runs them at seed N, named …-long-sN, so that the figures draw a set's seeds as one curve and range; e.g.
#   SET=atlas-head-fp8 HF=… RUNS=… bash experiments/h200/arms.sh
#   SET=grpo-tis SEED=1 HF=… RUNS=… bash experiments/h200/arms.sh
# Other arms go in ARMS, e.g. the stress pair at ~350 tokens (a larger learning rate, ~4 s a step for two arms):
#   ARMS="pg-fp16-lr5e-5 pg fp16 0;pg-bf16-lr5e-5 pg bf16 0" STEPS=300 EXTRA="--learning-rate 5e-5"
#
# Usage on the H200 machine, from $HOME/snap after experiments/h200/install.sh:
#   HF=$HOME/smolhf RUNS=<results folder> bash experiments/h200/arms.sh     (returns once all have started)
#   RUNS=<results folder> WATCH=540 bash experiments/h200/report.sh          (waits ≤ 540 s; progress, and the results tar)
#   python experiments/h200/arms_report.py <results folder> --figures <prefix> (table and figures, here)
set -uo pipefail
HF=${HF:?set HF to the SmolLM2 HF folder}
RUNS=${RUNS:?set RUNS to a results folder}
# No end-of-run mismatch probe (--probe-dtypes with none): the report reads none, and with answers this long its
# built-in sampler takes ~3 minutes of the window after the last step.
LONG="--count-lengths 250 290 --max-new-tokens 1280 --max-prompt-length 1536 --learning-rate 5e-5 --vllm-kv-cache-gb 16
      --eval-temperature 1 --probe-dtypes"
FP8="--sampler-dtype fp8"
S=${SEED:-0}
L=long$([ "$S" = 0 ] || echo "-s$S")  # a set's arms end -long at seed 0, -long-sN at seed N (one curve per arm)
case ${SET:-} in
  "") ;;
  long) [ -n "${ARMS:-}" ] || { echo "SET=long runs the arms of ARMS at the long setting; set ARMS too" >&2; exit 2; } ;;
  long-pair) ARMS="pg-fp16-$L pg fp16 $S;pg-bf16-$L pg bf16 $S" ;;
  atlas-head-fp8) ARMS="pg-bf16-fp32head-$L pg bf16 $S --lm-head-dtype fp32;grpo-tis-bf16-fp8-$L grpo-tis bf16 $S $FP8" ;;
  atlas-masks) ARMS="grpo-icepop-bf16-fp8-$L grpo-icepop bf16 $S $FP8;grpo-geo-mask-bf16-fp8-$L grpo-geo-mask bf16 $S $FP8" ;;
  grpo|grpo-tis|gspo) ARMS="$SET-fp16-$L $SET fp16 $S;$SET-bf16-$L $SET bf16 $S" ;;
  *) echo "SET=$SET: unknown set; the sets are long, long-pair, atlas-head-fp8, atlas-masks, grpo, grpo-tis, gspo" >&2; exit 2 ;;
esac
if [ -n "${SET:-}" ]; then EXTRA="$LONG ${EXTRA:-}" STEPS=${STEPS:-150}; fi
STEPS=${STEPS:-200}
ARMS=${ARMS:-"pg-fp16-s0 pg fp16 0;pg-fp16-s1 pg fp16 1;pg-bf16-s0 pg bf16 0;pg-bf16-s1 pg bf16 1;grpo-tis-bf16-s0 grpo-tis bf16 0"}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
source "$(dirname "${BASH_SOURCE[0]}")/phases.sh"

start() {  # NAME ALGO DTYPE SEED [FLAGS…]
  phase "$1"
  # shellcheck disable=SC2086
  setsid nohup python3 -m precision_oat.main --model "$HF" --task counting --sampler vllm --learner deepspeed \
    --zero-stage 1 --device cuda --prompts-per-step 8 --num-samples 4 --max-new-tokens 768 --temperature 1.0 \
    --learning-rate 2e-5 --micro-batch-size 4 --save-every 1000 --eval-every 50 --eval-samples 4 \
    --vllm-gpu-memory-utilization 0.05 --vllm-kv-cache-gb 6 --no-vllm-enforce-eager --wandb-mode disabled \
    --log-every 1 --steps "$STEPS" --algo "$2" --dtype "$3" --seed "$4" --output-dir "$RUNS/$1" ${EXTRA:-} "${@:5}" \
    > "$RUNS/$1.log" 2>&1 < /dev/null &
}

IFS=';' read -ra arms <<< "$ARMS"
# An arm at the long setting holds ~30 GB while its vLLM is awake (benchmarks/results/h200_round10, where a third arm
# on an H100 ran out of memory at its start): refuse more of them than the GPU holds before any starts.
if [ -n "${SET:-}" ] && command -v nvidia-smi > /dev/null; then
  gib=$(( $(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1) / 1024 ))
  fits=$(( gib / 30 ))
  if [ "${#arms[@]}" -gt "$fits" ]; then
    echo "arms.sh: ${#arms[@]} arms at the long setting need ~$(( 30 * ${#arms[@]} )) GiB and this GPU has $gib;" \
         "run $fits at a time (ARMS)" >&2
    exit 2
  fi
fi
pids=()
for arm in "${arms[@]}"; do
  # shellcheck disable=SC2086
  start $arm
  pids+=($!)
  # One engine starts at a time: its start-up compiles the model and captures CUDA graphs.
  sleep 30
done
if [ -n "${THEN:-}" ]; then
  # shellcheck disable=SC2016
  setsid nohup bash -c 'for pid in "${@:2}"; do while kill -0 "$pid" 2> /dev/null; do sleep 5; done; done; eval "$1"' \
    _ "$THEN" "${pids[@]}" > "$RUNS/then.log" 2>&1 < /dev/null &
fi
