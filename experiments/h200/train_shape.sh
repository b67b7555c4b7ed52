#!/usr/bin/env bash
# One of benchmarks/scale_ladder.py's shapes through the real command on one H200 (the ladder itself re-assembles the
# parts; this runs `python -m precision_oat.main`, preflight, probe and all): a random-weight model of SHAPE (default
# qwen2.5-1.5b, R1-Distill-Qwen-1.5B's shape) with SmolLM2's tokenizer, 8 prompts × 8 samples of up to TOKENS (default
# 8192) tokens, fp16, ZeRO-1, gradient checkpointing, two steps. A random model never stops, so every answer runs to
# the limit.
#
#   CODE=<the code to run> HF=<SmolLM2 HF folder> RUNS=<results folder> [SHAPE=…] [TOKENS=…] bash experiments/h200/train_shape.sh
#
# CODE (default: this repository) is the tree whose precision_oat the command runs; the model is built by this
# repository's experiments/h200/shape_folder.py. RUNS gets model/ (the random model), run/ (the run's folder:
# metrics.jsonl, preflight), run.log, smi.log (each second: the time, nvidia-smi's memory.used in MiB, and each
# process's pid:MiB) and wall.txt (start, end, seconds, exit status). LIMIT (seconds, default 600) stops the run, by its
# pid, if it is still going then (exit status 137 in wall.txt).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CODE=${CODE:-$HERE}
HF=${HF:?set HF to the SmolLM2 HF folder}
RUNS=${RUNS:?set RUNS to a results folder}
LIMIT=${LIMIT:-600}
SHAPE=${SHAPE:-qwen2.5-1.5b}
TOKENS=${TOKENS:-8192}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
[ -f "$RUNS/model/config.json" ] ||
  PYTHONPATH="$HERE:${PYTHONPATH:-}" python3 "$HERE/experiments/h200/shape_folder.py" "$SHAPE" "$HF" "$RUNS/model" \
    > "$RUNS/model.log" 2>&1
cd "$CODE" || exit 1
start=$(date +%s)
PYTHONPATH="$CODE:${PYTHONPATH:-}" python3 -m precision_oat.main --model "$RUNS/model" --task counting --sampler vllm \
  --learner deepspeed --zero-stage 1 --dtype fp16 --device cuda --prompts-per-step 8 --num-samples 8 \
  --max-new-tokens "$TOKENS" --max-prompt-length 1024 --gradient-checkpointing --micro-batch-size 8 --steps 2 \
  --output-dir "$RUNS/run" --wandb-mode disabled > "$RUNS/run.log" 2>&1 < /dev/null &
run=$!
while kill -0 "$run" 2> /dev/null; do
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '{s += $1} END {print s}')
  apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr -d ' ' | tr ',\n' ': ')
  echo "$(date +%s) $used $apps" >> "$RUNS/smi.log"
  if [ $(($(date +%s) - start)) -gt "$LIMIT" ]; then kill -9 "$run"; fi
  sleep 1
done
wait "$run"
status=$?
end=$(date +%s)
echo "start $(date -d "@$start" +%T) end $(date -d "@$end" +%T) wall_s $((end - start)) exit $status pid $run" \
  > "$RUNS/wall.txt"
