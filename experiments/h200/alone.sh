#!/usr/bin/env bash
# What the paper's-pair comparison needs alone on one H200, one after the other (about 13 minutes):
#
#   speed      benchmarks/step_time.py: built-in vs vLLM sampler tokens/s, built-in vs DeepSpeed
#              learner step time, fp16 and bf16 (the command of docs/results.md §3), three rounds in
#              alternating dtype order (about 6 minutes): two single runs differed by up to a quarter
#   seeds      benchmarks/step_time.py: vLLM's tokens/s at 512 prompts × 512 tokens with a seed per sequence
#              and with one seed for the batch (--no-vllm-row-seeds)
#   lab-pair   the mismatch lab on vLLM × DeepSpeed, on the counting task's own prompts (long answers)
#   lab-head   the built-in lab (KV-cache sampler × HF trainer) with the fp32-lm_head arm, same prompts
#   preflight  the fp16 preflight on those prompts, each followed by a 768-token response
# and, named in PARTS only, the precision atlas (docs/results.md §4f): the lab of vLLM × DeepSpeed over every precision
# choice (fp8: vLLM's W8A8 linear layers beside a bf16 trainer; bf16; bf16 with an fp32 head; fp16; fp16 with an fp32
# head; fp32), each engine a tenth of the GPU,
#   atlas-math       on 128 MATH problems (MATH=<math128.jsonl>, the first 128 rows of data/train/math_1k5 as JSON
#                    lines: the GPU machine has no `datasets`)
#   atlas-counting   on 64 counting prompts × 4 samples
#   atlas-invariant  on the MATH problems, bf16, fp16 and fp32 on vLLM's batch-invariant kernels (a lab run of its own:
#                    the kernels stay installed for the whole process)
#   atlas-invariant-counting  the same on the counting prompts
#
# Usage on the H200 machine, from $HOME/snap after experiments/h200/install.sh:
#   HF=$HOME/smolhf RUNS=<results folder> bash experiments/h200/alone.sh
#   RUNS=<results folder> WATCH=540 bash experiments/h200/report.sh  (progress, and the results tar)
# Each part gets at most $PART_LIMIT seconds (default 420); its output lands in $RUNS/NAME.log and $RUNS/NAME/.
# PARTS names the parts to run (default the first five, in the order above), e.g. PARTS="speed lab-pair preflight",
# or PARTS="atlas-math atlas-counting atlas-invariant" MATH=<math128.jsonl> for the atlas.
set -uo pipefail
HF=${HF:?set HF to the SmolLM2 HF folder}
RUNS=${RUNS:?set RUNS to a results folder}
PART_LIMIT=${PART_LIMIT:-420}
PARTS=${PARTS:-"speed seeds lab-pair lab-head preflight"}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"
source "$(dirname "${BASH_SOURCE[0]}")/phases.sh"

part() {  # NAME, then the command
  local name=$1; shift
  [[ " $PARTS " == *" $name "* ]] || return 0
  mkdir -p "$RUNS/$name"
  timed "$name" "$PART_LIMIT" "$@"
}

lab=(python3 -m precision_oat.lab --model "$HF" --task counting --num-samples 4 --max-new-tokens 768
     --device cuda --no-plots)
part speed python3 benchmarks/step_time.py --model "$HF" --dtypes fp16 bf16 --learners builtin deepspeed \
  --samplers builtin vllm --batch 128 --prompt-len 64 --response-len 256 --rounds 3 --device cuda \
  --output "$RUNS/speed/step_time.json"
part seeds python3 benchmarks/step_time.py --model "$HF" --dtypes fp16 --learners --samplers vllm vllm-batch-seeded \
  --batch 512 --prompt-len 64 --response-len 512 --device cuda --output "$RUNS/seeds/step_time.json"
part lab-pair "${lab[@]}" --num-prompts 64 --sampler vllm --trainer deepspeed --micro-batch-size 16 \
  --vllm-gpu-memory-utilization 0.2 --dtypes bf16 fp16 fp32 --output-dir "$RUNS/lab-pair"
part lab-head "${lab[@]}" --num-prompts 32 --sampler builtin --trainer hf --micro-batch-size 16 \
  --dtypes bf16 bf16+fp32head fp16 fp32 --output-dir "$RUNS/lab-head"
part preflight python3 -m precision_oat.lab.preflight --model "$HF" --task counting --num-prompts 32 \
  --response-tokens 768 --device cuda --output-dir "$RUNS/preflight"

pair=(python3 -m precision_oat.lab --model "$HF" --sampler vllm --trainer deepspeed --device cuda --temperature 1.0
      --micro-batch-size 16 --vllm-gpu-memory-utilization 0.1 --no-plots)
atlas=(bf16 bf16+fp32head fp16 fp16+fp32head fp32 fp8)  # fp8 last: a lab run keeps the arms before a failure
math=(--prompt-data "${MATH:-math128.jsonl}" --prompt-template chat --num-prompts 128 --num-samples 1 --max-new-tokens 512)
part atlas-math "${pair[@]}" "${math[@]}" --dtypes "${atlas[@]}" --output-dir "$RUNS/atlas-math"
part atlas-counting "${pair[@]}" --task counting --num-prompts 64 --num-samples 4 --max-new-tokens 768 \
  --dtypes "${atlas[@]}" --output-dir "$RUNS/atlas-counting"
part atlas-invariant "${pair[@]}" "${math[@]}" --batch-invariant --dtypes bf16 fp16 fp32 --output-dir "$RUNS/atlas-invariant"
part atlas-invariant-counting "${pair[@]}" --task counting --num-prompts 64 --num-samples 4 --max-new-tokens 768 \
  --batch-invariant --dtypes bf16 fp16 fp32 --output-dir "$RUNS/atlas-invariant-counting"
phase "done"
