#!/usr/bin/env bash
# The paper's pair (vLLM sampler × DeepSpeed) on two H200s of one host, under torchrun (docs/scaling.md), in parts:
#
#   agree    SmolLM2 on counting (8 × 4 answers of up to 768 tokens, seed 0, STEPS steps, default 20) for each run
#            of AGREE, <zero>-<dtype> or <zero>-<dtype>-invariant (with --batch-invariant; default all four of ZeRO
#            1 and 3 × fp16 and bf16, and 1-fp16-invariant): the same command on one GPU (one-<run>) and under
#            torchrun --nproc-per-node 2 (two-<run>), for each side of SIDES (default "one two"). On a GPU vLLM's
#            samples depend on its batch (16 answers an engine on two GPUs, 32 on one), so only the batch-invariant
#            pair can log the same figures but for rounding; the others must agree as runs of one distribution.
#            Timing is not this part's subject, so all one-GPU runs go at once, taking the GPUs in turn, then all
#            two-GPU runs at once, their starts STAGGER seconds apart (default 30: an engine's start compiles the
#            model and captures CUDA graphs); NCCL logs its set-up (NCCL_DEBUG=INFO), so the logs show which
#            transport each collective took.
#   kill     a two-GPU run (ZeRO-1, fp16, a checkpoint every 2 steps) whose rank 1 is killed (kill -9) once a
#            checkpoint exists; kill.txt records how long rank 0 and the launcher took to end, their exit status
#            and rank 0's last word (its SIGTERM or error line); the same command with --resume then runs 4 steps
#            past the checkpoint. With agree, it runs beside the one-GPU runs.
#   scaling  the 1.5B shape (benchmarks/scale_ladder.py's qwen2.5-1.5b, random weights, SmolLM2's tokenizer), 8 × 8
#            answers of 4,096 tokens (SCALING_PROMPTS × 8: the prompts a step, default 8), fp16, ZeRO-1, gradient
#            checkpointing, 3 steps: on one GPU, then on two (scaling-one/, scaling-two/, or scaling<N>-one/ … at
#            SCALING_PROMPTS=N other than 8; each on its side of SIDES: the one-GPU side runs on a one-GPU machine
#            too); efficiency = one-GPU step / (2 × two-GPU step). At 64 answers it was 0.67, the sampler's decode
#            hardly shrinking with half the batch; more prompts a step measure where it rises.
#
# Usage on a machine with two H200s, from $HOME/snap after experiments/h200/install.sh:
#   HF=$HOME/smolhf RUNS=<results folder> [PARTS="agree kill scaling"] bash experiments/h200/two_gpus.sh
#   RUNS=<results folder> WATCH=540 bash experiments/h200/report.sh   (progress, and the results tar)
#   python experiments/h200/two_gpus_report.py <results folder>  (the three parts' tables, here)
# Measured: the four one-GPU runs with the kill part beside them took 8 minutes, the four two-GPU runs 9 (two of
# them hung to their limit), the scaling's one-GPU side 5.5 (its model folder included); PARTS and SIDES spread the
# work over calls or machines. Each run gets at most LIMIT seconds (default 600) before it is stopped, so a hang ends;
# phases.log has every run's start, end and exit status. NVLink multicast stays off (the machine's own setting,
# kept here for the runs).
set -uo pipefail
HF=${HF:?set HF to the SmolLM2 HF folder}
RUNS=${RUNS:?set RUNS to a results folder}
PARTS=${PARTS:-"agree kill scaling"}
STEPS=${STEPS:-20}
AGREE=${AGREE:-"1-fp16 1-bf16 3-fp16 3-bf16 1-fp16-invariant"}
SIDES=${SIDES:-"one two"}
LIMIT=${LIMIT:-600}
STAGGER=${STAGGER:-30}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT
mkdir -p "$RUNS"
source "$(dirname "${BASH_SOURCE[0]}")/phases.sh"

# No end-of-run mismatch probe: none of the parts reads it, and at the 1.5B shape it takes minutes.
pair=(-m precision_oat.main --task counting --sampler vllm --learner deepspeed --device cuda --wandb-mode disabled
      --seed 0 --probe-dtypes)
counting=("${pair[@]}" --model "$HF" --prompts-per-step 8 --num-samples 4 --max-new-tokens 768 --temperature 1.0
          --learning-rate 2e-5 --micro-batch-size 4 --vllm-gpu-memory-utilization 0.05 --vllm-kv-cache-gb 6
          --no-vllm-enforce-eager)
two=(-m torch.distributed.run --standalone --nproc-per-node 2)

wants() { [[ " $PARTS " == *" $1 "* ]]; }
on_side() { [[ " $SIDES " == *" $1 "* ]]; }

rank_pid() {  # RANK OUTPUT_DIR: the pid of torchrun's worker of that rank writing into OUTPUT_DIR
  local entry
  for entry in /proc/[0-9]*; do
    tr '\0' '\n' < "$entry/cmdline" 2> /dev/null | grep -qxF "$2" || continue
    tr '\0' '\n' < "$entry/cmdline" 2> /dev/null | grep -qxF torch.distributed.run && continue
    tr '\0' '\n' < "$entry/environ" 2> /dev/null | grep -qxF "RANK=$1" && { basename "$entry"; return; }
  done
}

kill_part() {
  local out="$RUNS/kill" latest="$RUNS/kill/checkpoints/latest"
  local kill_run=("${two[@]}" "${counting[@]}" --zero-stage 1 --dtype fp16 --save-every 2 --output-dir "$out")
  phase kill
  python3 "${kill_run[@]}" --steps 1000 > "$RUNS/kill.log" 2>&1 < /dev/null &
  local launcher=$! start=$SECONDS
  until [ -f "$latest" ] || ! kill -0 "$launcher" 2> /dev/null || [ $((SECONDS - start)) -gt "$LIMIT" ]; do
    sleep 1
  done
  local rank0 rank1
  rank0=$(rank_pid 0 "$out") rank1=$(rank_pid 1 "$out")
  if [ -f "$latest" ] && [ -n "$rank1" ]; then
    kill -9 "$rank1"
    local killed=$SECONDS
    while kill -0 "$rank0" 2> /dev/null && [ $((SECONDS - killed)) -lt 300 ]; do sleep 1; done
    local rank0_s=$((SECONDS - killed)) status=0
    wait "$launcher" || status=$?
    echo "rank 1 (pid $rank1) killed after $(cat "$latest"); rank 0 ended ${rank0_s} s later, the launcher" \
      "$((SECONDS - killed)) s later with exit status $status" > "$RUNS/kill.txt"
    grep -h -E "^(error|SIGTERM): " "$RUNS/kill.log" >> "$RUNS/kill.txt"
    timed kill-resume "$LIMIT" python3 "${kill_run[@]}" --resume --steps "$(( $(sed 's/step_//' "$latest") + 4 ))"
  else
    kill -9 "$launcher" 2> /dev/null
    echo "no checkpoint within $LIMIT s, or no rank 1 found; nothing killed" > "$RUNS/kill.txt"
  fi
  phase kill "done"
}

if wants agree; then
  agree_flags() {  # RUN: its flags
    local zero dtype invariant
    IFS=- read -r zero dtype invariant <<< "$1"
    echo --zero-stage "$zero" --dtype "$dtype" ${invariant:+--batch-invariant} --steps "$STEPS"
  }
  gpu=0
  if on_side one; then
    for run in $AGREE; do
      # shellcheck disable=SC2046
      CUDA_VISIBLE_DEVICES=$gpu timed "one-$run" "$LIMIT" python3 "${counting[@]}" $(agree_flags "$run") \
        --output-dir "$RUNS/one-$run" &
      gpu=$((1 - gpu))
      sleep "$STAGGER"
    done
  fi
  wants kill && kill_part &
  wait
  if on_side two; then
    for run in $AGREE; do
      # shellcheck disable=SC2046
      timed "two-$run" "$LIMIT" python3 "${two[@]}" "${counting[@]}" $(agree_flags "$run") \
        --output-dir "$RUNS/two-$run" &
      sleep "$STAGGER"
    done
  fi
  wait
elif wants kill; then
  kill_part
fi

if wants scaling; then
  model="$RUNS/shape"
  [ -f "$model/config.json" ] ||
    PYTHONPATH="$HERE:${PYTHONPATH:-}" python3 "$HERE/experiments/h200/shape_folder.py" qwen2.5-1.5b "$HF" "$model" \
      > "$RUNS/shape.log" 2>&1
  prompts=${SCALING_PROMPTS:-8}
  scaling=scaling
  [ "$prompts" = 8 ] || scaling=scaling$prompts  # scaling32-one/ at 32 prompts
  shape=("${pair[@]}" --model "$model" --zero-stage 1 --dtype fp16 --prompts-per-step "$prompts"
         --num-samples 8 --max-new-tokens 4096 --max-prompt-length 1024 --gradient-checkpointing --micro-batch-size 8
         --steps 3)
  on_side one && timed "$scaling-one" "$LIMIT" python3 "${shape[@]}" --output-dir "$RUNS/$scaling-one"
  on_side two && timed "$scaling-two" "$LIMIT" python3 "${two[@]}" "${shape[@]}" --output-dir "$RUNS/$scaling-two"
fi
phase "done"
