#!/usr/bin/env bash
# The precision atlas on one H200 (docs/results.md §4f): the mismatch lab of the paper's pair (vLLM sampler ×
# DeepSpeed trainer) on SmolLM2 over every precision choice — fp8 (vLLM's W8A8 linear layers, bf16 trainer), bf16,
# bf16 with an fp32 head, fp16, fp16 with an fp32 head, fp32 — on 128 MATH problems and on 64 counting prompts, and
# the same pair on vLLM's batch-invariant kernels (a run of its own: they stay installed for the whole process).
# Each arm's engine stays alive in the lab's process, so each takes a tenth of the GPU.
#
#   HF=<SmolLM2 HF folder> MATH=<math128.jsonl> RUNS=<results folder> bash experiments/h200/atlas.sh
#   PARTS="math counting invariant" (the default) picks the parts; PART_LIMIT bounds each (seconds, default 420).
#
# math128.jsonl: the first 128 rows of data/train/math_1k5 as JSON lines (the GPU machine has no `datasets`):
#   python -c "import json; from precision_oat.tasks.data import load_examples; [print(json.dumps({'problem': e.question,
#   'answer': e.reference})) for e in load_examples('data/train/math_1k5', input_key='problem', output_key='answer',
#   limit=128)]" > math128.jsonl
set -uo pipefail
HF=${HF:?set HF to the SmolLM2 HF folder}
MATH=${MATH:?set MATH to math128.jsonl}
RUNS=${RUNS:?set RUNS to a results folder}
PARTS=${PARTS:-"math counting invariant"}
PART_LIMIT=${PART_LIMIT:-420}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS"

part() {  # NAME, then the command
  local name=$1; shift
  [[ " $PARTS " == *" $name "* ]] || return 0
  echo "$(date +%T) $name" >> "$RUNS/phases.log"
  local status=0
  timeout -k 20 "$PART_LIMIT" "$@" --output-dir "$RUNS/$name" > "$RUNS/$name.log" 2>&1 || status=$?
  echo "$(date +%T) $name exit $status" >> "$RUNS/phases.log"
}

pair=(python3 -m precision_oat.mismatch --model "$HF" --sampler vllm --trainer deepspeed --device cuda
      --temperature 1.0 --micro-batch-size 16 --vllm-gpu-memory-utilization 0.1 --no-plots)
all=(bf16 bf16+fp32head fp16 fp16+fp32head fp32 fp8)  # fp8 last: a lab run keeps the arms before a failure
math=(--prompt-data "$MATH" --prompt-template chat --num-prompts 128 --num-samples 1 --max-new-tokens 512)
part math "${pair[@]}" "${math[@]}" --dtypes "${all[@]}"
part counting "${pair[@]}" --task counting --num-prompts 64 --num-samples 4 --max-new-tokens 768 --dtypes "${all[@]}"
part invariant "${pair[@]}" "${math[@]}" --batch-invariant --dtypes bf16 fp16 fp32
echo "$(date +%T) done" >> "$RUNS/phases.log"
