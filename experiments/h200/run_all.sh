#!/usr/bin/env bash
# Every GPU experiment of docs/results.md in one call on one H200 (~8 minutes):
#   1. GGUF -> fp32 HF folder (through load_policy);
#   2. eight RL runs in parallel on the GPU: {pg, grpo} x {fp16, bf16} x lr {1e-5, 5e-5},
#      SmolLM2-135M-Instruct on the arithmetic task (max operand 9, 16 new tokens), seed 0;
#   3. meanwhile the mismatch lab: 128 MATH prompts (chat template) x 1 sample x <= 512 tokens, bf16/fp16/fp32;
#   4. then, alone on the GPU, benchmarks/step_time.py (fp16 vs bf16).
# Usage (device machine, repo root, after the GGUF is at $GGUF_DIR; HF and RESULTS set): bash experiments/h200/run_all.sh
set -uo pipefail
source "$(dirname "$0")/folders.sh"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false

[ -e "$R" ] && { echo "RESULTS=$R exists; choose a new folder" >&2; exit 1; }
mkdir -p "$R"
[ -f "$HF/config.json" ] || python3 experiments/h200/gguf_to_hf.py "$GGUF_DIR" "$GGUF" "$HF" 2>&1 | grep -v "it/s" || exit 1

for lr in 1e-5 5e-5; do for algo in pg grpo; do for dtype in fp16 bf16; do
  name=rl-$algo-$dtype-lr$lr
  timeout 400 python3 -m precision_oat.main --model "$HF" --algo $algo --dtype $dtype --max-operand 9 \
    --max-new-tokens 16 --prompts-per-step 16 --num-samples 8 --steps "$STEPS" --learning-rate $lr \
    --micro-batch-size 128 --seed 0 --device cuda --wandb-mode disabled --log-every 10 \
    --output-dir "$R/$name" > "$R/$name.log" 2>&1 &
done; done; done

timeout 300 python3 -m precision_oat.mismatch --model "$HF" --prompt-data .h200b/math128.jsonl --prompt-template chat \
  --num-prompts 128 --num-samples 1 --max-new-tokens 512 --temperature 1.0 --device cuda \
  --output-dir "$R/lab-smollm2-math" 2>&1 | grep -v "it/s"
wait
for f in "$R"/rl-*.log; do echo "== $f"; tail -n 5 "$f"; done

timeout 120 python3 benchmarks/step_time.py --model "$HF" --dtypes fp16 bf16 --batch 128 --prompt-len 64 \
  --response-len 256 --output "$R/step_time.json" 2>&1 | grep -v "it/s"
