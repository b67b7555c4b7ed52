#!/usr/bin/env bash
# Round 4 on one H200: the paper's pair (vLLM sampler x DeepSpeed trainer) inside the project.
#
#   PHASE=start   convert the GGUF, start the long-response RL runs (background), then the mismatch
#                 lab (vLLM x DeepSpeed and built-in x HF, with the trainer self-consistency floor)
#                 and the fp16 preflight while they train; at $LIMIT seconds the runs get SIGTERM
#                 and save a checkpoint at their next step boundary.
#   PHASE=resume  continue every unfinished run with --resume until $LIMIT seconds.
#   PHASE=speed   the speed table alone on the GPU: built-in vs vLLM sampler, built-in vs DeepSpeed
#                 learner, fp16 and bf16.
#
# The RL runs: the counting task (long answers; --task counting), SmolLM2-135M-Instruct, vLLM
# sampler with CUDA graphs, DeepSpeed learner (ZeRO-1), all at once on the one GPU:
#   grpo and pg in fp16 and bf16, seeds 0 and 1; grpo in fp32 (sampler and trainer); grpo-tis in
#   bf16; grpo in bf16 with --self-consistent-old-logprobs (short: the phantom-clip comparison).
#
# Usage on the device machine, repo root, with the bundle installed as ../shared/gpu/README.md says
# (SmolLM2 as an HF folder at $HF): PHASE=start bash experiments/h200/round4.sh
# Run state lives in $RUNS (kept while the machine is held); metrics, configs, logs and the lab's
# outputs are copied to $OUT/round4 at the end of every phase.
#
# Memory, measured in round 4: a DeepSpeed learner peaks near 1.5 GB per response of ~700 tokens
# in a micro-batch (50 GB at MICRO=32), and a vLLM engine takes UTIL x the GPU's memory. For the
# ten arms at once: MICRO=4 UTIL=0.05 LAB_UTIL=0.08 EAGER=0 (CUDA graphs: sampling was ~1k tok/s
# per run in eager mode, the bottleneck of every step). The fp32-lm_head arm of the built-in lab:
# BUILTIN_DTYPES="bf16 bf16+fp32head fp16 fp32".
set -uo pipefail
HF=${HF:-$HOME/smolhf}
RUNS=${RUNS:-$HOME/round4}
OUT=${OUT:-$PWD/out}
PHASE=${PHASE:-start}
LIMIT=${LIMIT:-520}
STEPS=${STEPS:-200}
MAXTOK=${MAXTOK:-768}
PROMPTS=${PROMPTS:-.gpu/math128.jsonl}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS" "$OUT/round4"
started=$(date +%s)

MICRO=${MICRO:-32}
UTIL=${UTIL:-0.12}
LAB_UTIL=${LAB_UTIL:-0.2}
EAGER=${EAGER:-1}
eager=$([ "$EAGER" = 1 ] && echo --vllm-enforce-eager || echo --no-vllm-enforce-eager)
common=(--model "$HF" --task counting --sampler vllm --learner deepspeed --zero-stage 1 --device cuda
        --prompts-per-step 8 --num-samples 4 --max-new-tokens "$MAXTOK" --temperature 1.0
        --learning-rate 2e-5 --micro-batch-size "$MICRO" --save-every 10 --eval-every 25 --eval-samples 1
        --vllm-gpu-memory-utilization "$UTIL" "$eager" --probe-dtypes --wandb-mode disabled
        --log-every 10)

arms() {  # name, then the flags that differ
  for seed in ${SEEDS:-0 1}; do for algo in grpo pg; do for dtype in fp16 bf16; do
    echo "$algo-$dtype-seed$seed --algo $algo --dtype $dtype --seed $seed"
  done; done; done
  echo "grpo-fp32-seed0 --algo grpo --dtype fp32 --seed 0"
  echo "grpo-tis-bf16-seed0 --algo grpo-tis --dtype bf16 --seed 0"
  [ "${SELFCONSISTENT:-0}" = 1 ] && echo "grpo-bf16-seed0-selfconsistent --algo grpo --dtype bf16 --seed 0 --self-consistent-old-logprobs --steps 30"
}

collect() {
  for d in "$RUNS"/*/; do
    name=$(basename "$d"); mkdir -p "$OUT/round4/$name"
    cp "$d"/{metrics.jsonl,config.json,summary.json} "$OUT/round4/$name/" 2>/dev/null
  done
  cp "$RUNS"/*.log "$OUT/round4/" 2>/dev/null
  for lab in lab_vllm_deepspeed lab_builtin_hf preflight; do
    [ -d "$RUNS/$lab" ] && { mkdir -p "$OUT/round4/$lab"; cp "$RUNS/$lab"/*.json "$RUNS/$lab"/*.npz "$OUT/round4/$lab/" 2>/dev/null; }
  done
  [ -f "$RUNS/step_time.json" ] && cp "$RUNS/step_time.json" "$OUT/round4/"
  true
}

start_runs() {
  local resume=$1
  while read -r name flags; do
    if [ "$resume" = 1 ]; then
      [ -f "$RUNS/$name/summary.json" ] && continue  # finished
      [ -f "$RUNS/$name/checkpoints/latest" ] || continue
      extra=(--resume)
    else
      extra=()
    fi
    left=$((LIMIT - ($(date +%s) - started)))
    # shellcheck disable=SC2086
    timeout -s TERM -k 60 "$left" python3 -m precision_oat.main "${common[@]}" --steps "$STEPS" $flags \
      --output-dir "$RUNS/$name" "${extra[@]}" >> "$RUNS/$name.log" 2>&1 &
    # vLLM profiles free GPU memory at start-up: one engine starts at a time.
    sleep 20
  done < <(arms)
}

case "$PHASE" in
  start)
    [ -f "$HF/config.json" ] || { echo "no SmolLM2 HF folder at $HF" >&2; exit 1; }
    timeout $((LIMIT - ($(date +%s) - started))) python3 -m precision_oat.mismatch --model "$HF" \
      --prompt-data "$PROMPTS" --prompt-template chat --num-prompts 128 --num-samples 4 --max-new-tokens 512 --sampler vllm --trainer deepspeed \
      --vllm-gpu-memory-utilization "$LAB_UTIL" --micro-batch-size 16 "$eager" --dtypes bf16 fp16 fp32 --device cuda --no-plots \
      --output-dir "$RUNS/lab_vllm_deepspeed" > "$RUNS/lab_vllm_deepspeed.log" 2>&1
    tail -n 8 "$RUNS/lab_vllm_deepspeed.log"
    start_runs 0
    [ "${BUILTIN_LAB:-1}" = 1 ] && timeout $((LIMIT - ($(date +%s) - started))) python3 -m precision_oat.mismatch --model "$HF" \
      --prompt-data "$PROMPTS" --prompt-template chat --num-prompts 32 --num-samples 4 --max-new-tokens 512 --sampler builtin --trainer hf \
      --dtypes ${BUILTIN_DTYPES:-bf16 fp16 fp32} --device cuda --no-plots --output-dir "$RUNS/lab_builtin_hf" > "$RUNS/lab_builtin_hf.log" 2>&1
    [ "${BUILTIN_LAB:-1}" = 1 ] && timeout $((LIMIT - ($(date +%s) - started))) python3 -m precision_oat.mismatch.preflight --model "$HF" --prompt-data "$PROMPTS" \
      --prompt-template chat --num-prompts 32 --device cuda --output-dir "$RUNS/preflight" > "$RUNS/preflight.log" 2>&1
    tail -n 4 "$RUNS"/lab_*.log "$RUNS/preflight.log"
    wait ;;
  resume)
    start_runs 1
    wait ;;
  speed)
    python3 benchmarks/step_time.py --model "$HF" --dtypes fp16 bf16 --learners builtin deepspeed \
      --samplers builtin vllm --batch 128 --prompt-len 64 --response-len 256 --device cuda \
      --output "$RUNS/step_time.json" 2>&1 | grep -v "it/s" | tail -n 12 ;;
esac
for f in "$RUNS"/*-seed*.log; do echo "== $(basename "$f"): $(grep -E '^step ' "$f" | tail -n 1)"; done
collect
tar czf "$OUT/round4.tgz" -C "$OUT" round4 && rm -rf "$OUT/round4"
