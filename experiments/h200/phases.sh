# shellcheck shell=bash
# Sourced by the H200 scripts: each run's start, end and exit status in $RUNS/phases.log, which report.sh prints.

phase() {  # a line of phases.log, after the time
  echo "$(date +%T) $*" >> "$RUNS/phases.log"
}

timed() {  # NAME LIMIT, then the command: run for at most LIMIT seconds, its console in NAME.log
  local name=$1 limit=$2 status=0
  shift 2
  phase "$name"
  timeout --kill-after 20 "$limit" "$@" > "$RUNS/$name.log" 2>&1 < /dev/null || status=$?
  phase "$name exit $status"
}
