#!/usr/bin/env bash
# Progress of the runs under $RUNS (experiments/h200/scale.sh or arms.sh), and a tar of their results into $OUT
# (default $RUNS), for copying off the machine:
#   RUNS=<results folder> [OUT=<folder for results.tgz>] bash experiments/h200/report.sh
#   RUNS=<results folder> [OUT=<folder for results.tgz>] WATCH=540 bash experiments/h200/report.sh
# WATCH=S renews the tar every 30 s for up to S seconds, ending early once every run that logs steps has printed
# its `done:` line: a command cut short (a time limit, a lost machine) still leaves the results of the last 30 s,
# and one command can wait out the runs. Under a script that runs its parts one after another (alone.sh,
# two_gpus.sh) the watch can also end in the moment between two parts; the next command watches on.
RUNS=${RUNS:?set RUNS to the results folder}
OUT=${OUT:-$RUNS}
cd "$RUNS" 2>/dev/null || { echo "no $RUNS yet"; exit 0; }

pack() {
  tar czf "$OUT/results.tgz" --exclude=checkpoints --exclude="*.safetensors" --exclude=models ./*.log ./*.json \
    ./*.txt ./*/ 2>/dev/null
}
all_done() {  # every console with a step line has its done: line too
  local stepping finished
  stepping=$(grep -l -E '^step ' ./*.log 2>/dev/null | wc -l)
  finished=$(grep -l -E '^done:' ./*.log 2>/dev/null | wc -l)
  [ "$stepping" -gt 0 ] && [ "$finished" -ge "$stepping" ]
}

end=$((SECONDS + ${WATCH:-0}))
while [ "$SECONDS" -lt "$end" ] && ! all_done; do
  pack
  left=$((end - SECONDS))
  sleep $((left < 30 ? left : 30))
done

cat phases.log 2>/dev/null
for f in ./*.log; do
  case $f in ./phases.log|./ladder*) continue ;; esac
  echo "== $f: $(grep -E '^step ' "$f" | tail -n 1 | cut -c1-300)"
  grep -h -E '^(done|time per step):' "$f"
done
grep -h " × " ladder*.log 2>/dev/null
grep -h -E "Error|error:|Traceback" ./*.log 2>/dev/null | tail -n 5
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
pack
ls -la "$OUT"
