#!/usr/bin/env bash
# Progress of the runs under $RUNS (experiments/h200/scale.sh or arms.sh), and a tar of their results into $OUT.
#   RUNS=<results folder> bash experiments/h200/report.sh
RUNS=${RUNS:?set RUNS to the results folder}
cd "$RUNS" 2>/dev/null || { echo "no $RUNS yet"; exit 0; }
cat phases.log 2>/dev/null
for f in ./*.log; do
  case $f in ./phases.log|./ladder*) continue ;; esac
  echo "== $f: $(grep -E '^step ' "$f" | tail -n 1 | cut -c1-300)"
  grep -h -E '^(done|time per step):' "$f"
done
grep -h " × " ladder*.log 2>/dev/null
grep -h -E "Error|error:|Traceback" ./*.log 2>/dev/null | tail -n 5
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
tar czf "$OUT/results.tgz" --exclude=checkpoints --exclude="*.safetensors" --exclude=models ./*.log ./*.json ./*/ 2>/dev/null
ls -la "$OUT"
