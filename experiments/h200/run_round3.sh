#!/usr/bin/env bash
# Third round of the RL runs of docs/results.md §2 (§2.5) in one call on one H200: the arithmetic task
# with the few-shot prompt (four worked sums, then "a+b="), so the policy starts inside the reward band.
# {pg, grpo} x {fp16, bf16} x $SEEDS (default 0), all in parallel on the one GPU, lr 1e-5, temperature 1,
# 16 prompts x 8 samples, 4 new tokens, $STEPS steps (each run is cut at $LIMIT seconds).
# Usage (device machine, repo root, the GGUF at $GGUF_DIR; HF and RESULTS set): bash experiments/h200/run_round3.sh
# Results go to $RESULTS/rl-<algo>-<dtype>-lr1e-5-seed<seed>/ and $RESULTS/round3.tgz.
set -uo pipefail
source "$(dirname "$0")/folders.sh"
LIMIT=${LIMIT:-250}
MAX_OPERAND=${MAX_OPERAND:-9}
SEEDS=${SEEDS:-0}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false

[ -e "$R" ] && { echo "RESULTS=$R exists; choose a new folder" >&2; exit 1; }
mkdir -p "$R"
[ -f "$HF/config.json" ] || python3 experiments/h200/gguf_to_hf.py "$GGUF_DIR" "$GGUF" "$HF" 2>&1 | grep -v "it/s" || exit 1

for seed in $SEEDS; do for algo in pg grpo; do for dtype in fp16 bf16; do
  name=rl-$algo-$dtype-lr1e-5-seed$seed
  timeout "$LIMIT" python3 -m precision_oat.main --model "$HF" --algo $algo --dtype $dtype \
    --prompt-template fewshot --max-operand "$MAX_OPERAND" --temperature 1.0 --max-new-tokens 4 \
    --prompts-per-step 16 --num-samples 8 --steps "$STEPS" --learning-rate 1e-5 --micro-batch-size 128 \
    --seed $seed --device cuda --wandb-mode disabled --log-every 25 --output-dir "$R/$name" > "$R/$name.log" 2>&1 &
done; done; done
wait
for f in "$R"/rl-*.log; do echo "== $f"; tail -n 2 "$f"; done
(cd "$R" && tar czf round3.tgz rl-*.log rl-*/metrics.jsonl rl-*/summary.json rl-*/config.json)
