#!/usr/bin/env bash
# One GPU, the paper's pair (vLLM sampler × DeepSpeed ZeRO-1), the same command and seed run plainly and under
# torchrun --nproc-per-node 1 (docs/scaling.md): the launcher must change neither the numbers nor the cost. Each
# run alone on the GPU, with the device's memory in use polled every second (peak in <run>.memory).
#
#   HF=<SmolLM2 HF folder> RUNS=<results folder> bash experiments/h200/launcher.sh
#   (STEPS, default 10; LIMIT, default 400: seconds a run may take before it is stopped, so a hang ends)
set -uo pipefail
HF=${HF:?set HF to the SmolLM2 HF folder}
RUNS=${RUNS:?set RUNS to a results folder}
STEPS=${STEPS:-10}
LIMIT=${LIMIT:-400}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
source "$(dirname "${BASH_SOURCE[0]}")/phases.sh"

run=(-m precision_oat.main --model "$HF" --task counting --sampler vllm --learner deepspeed --zero-stage 1
     --device cuda --prompts-per-step 8 --num-samples 4 --max-new-tokens 768 --temperature 1.0 --learning-rate 2e-5
     --micro-batch-size 4 --vllm-gpu-memory-utilization 0.05 --vllm-kv-cache-gb 6 --no-vllm-enforce-eager
     --wandb-mode disabled --probe-dtypes --seed 0 --steps "$STEPS")

measured() {  # NAME, then the command
  local name=$1; shift
  (while sleep 1; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done) > "$RUNS/$name.memory.log" &
  local poll=$! start=$SECONDS
  timed "$name" "$LIMIT" "$@" --output-dir "$RUNS/$name"
  kill "$poll" 2> /dev/null
  echo "$(sort -n "$RUNS/$name.memory.log" | tail -n 1) MiB peak, $((SECONDS - start)) s" > "$RUNS/$name.memory"
}

measured plain python3 "${run[@]}"
measured torchrun python3 -m torch.distributed.run --standalone --nproc-per-node 1 "${run[@]}"
phase "done"
