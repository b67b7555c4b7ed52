#!/usr/bin/env bash
# Second round of the RL runs of docs/results.md §2 in one call on one H200 (~7 minutes), twelve
# runs in parallel on the one GPU, SmolLM2-135M-Instruct on the arithmetic task (raw "a+b=",
# max operand 9, 16 new tokens, 16 prompts x 8 samples, lr 1e-5, 150 steps):
#   - temperature 1, seeds 1 and 2: {pg, grpo} x {fp16, bf16} (seed 0 is round 1's);
#   - temperature 0.3, seed 0: {pg, grpo} x {fp16, bf16} (starts at a reward of ~0.15 instead of ~0.05).
# Usage (device machine, repo root, the GGUF at $GGUF_DIR; HF and RESULTS set): bash experiments/h200/run_round2.sh
# Results go to $RESULTS/{t1,t03}/rl-<algo>-<dtype>-lr1e-5-seed<seed>/ and $RESULTS/round2.tgz.
set -uo pipefail
source "$(dirname "$0")/folders.sh"
LIMIT=${LIMIT:-400}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false

[ -e "$R" ] && { echo "RESULTS=$R exists; choose a new folder" >&2; exit 1; }
mkdir -p "$R/t1" "$R/t03"
[ -f "$HF/config.json" ] || python3 experiments/h200/gguf_to_hf.py "$GGUF_DIR" "$GGUF" "$HF" 2>&1 | grep -v "it/s" || exit 1

run() {  # folder temperature seed algo dtype
  local name=rl-$4-$5-lr1e-5-seed$3
  timeout "$LIMIT" python3 -m precision_oat.main --model "$HF" --algo "$4" --dtype "$5" --max-operand 9 \
    --temperature "$2" --max-new-tokens 16 --prompts-per-step 16 --num-samples 8 --steps "$STEPS" \
    --learning-rate 1e-5 --micro-batch-size 128 --seed "$3" --device cuda --wandb-mode disabled --log-every 25 \
    --output-dir "$R/$1/$name" > "$R/$1/$name.log" 2>&1 &
}
for algo in pg grpo; do for dtype in fp16 bf16; do
  run t1 1.0 1 $algo $dtype; run t1 1.0 2 $algo $dtype; run t03 0.3 0 $algo $dtype
done; done
wait
for f in "$R"/*/rl-*.log; do echo "== $f"; tail -n 2 "$f"; done
(cd "$R" && tar czf round2.tgz */rl-*.log */rl-*/metrics.jsonl */rl-*/summary.json */rl-*/config.json)
