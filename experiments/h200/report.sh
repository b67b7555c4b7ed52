#!/usr/bin/env bash
# Progress of experiments/h200/scale.sh (or any runs under $RUNS), and a tar of its results into $OUT.
#   RUNS=<results folder> bash experiments/h200/report.sh
RUNS=${RUNS:?set RUNS to the results folder}
cd "$RUNS" 2>/dev/null || { echo "no $RUNS yet"; exit 0; }
cat phases.log 2>/dev/null
for f in loop-*.log; do [ -f "$f" ] && echo "== $f: $(grep -E '^step ' "$f" | tail -n 1 | cut -c1-300)"; done
grep -h " × " ladder*.log 2>/dev/null
grep -h -E "Error|error:|Traceback" ./*.log 2>/dev/null | tail -n 5
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
tar czf "$OUT/results.tgz" --exclude=checkpoints --exclude="*.safetensors" --exclude=models ./*.log ./*.json ./loop-*/ 2>/dev/null
ls -la "$OUT"
