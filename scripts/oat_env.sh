#!/usr/bin/env bash
# Builds, once, a Python 3.10 venv with the Oat stack (oat-llm 0.2.4, vLLM 0.8.4, DeepSpeed
# 0.16.8, launchpad) and precision-oat, and prints its path as the last line of stdout:
#
#   VENV=$(bash scripts/oat_env.sh | tail -1)
#   "$VENV/bin/python" -m pytest tests/oat
#
# The venv lives outside the clone, in ${PRECISION_OAT_CACHE:-$HOME/.cache/precision-oat},
# named after a hash of requirements/oat-py310.txt and of this script, so a change to either
# builds a new one and an unchanged pair reuses it. It counts as built only once the marker
# file is written; a half-built venv is removed and built again. Every call points the venv's
# editable precision-oat at the clone the script was run from (a few seconds).
#
# Every package is an exact pin installed with --no-deps: pip resolves nothing, so it cannot
# pull a torch other than the 2.6.0 that vllm 0.8.4 was built against. About 9 GB; 6-9
# minutes on the 2-core CI machine. Build log goes to stderr. Override the interpreter with
# PYTHON=/path/to/python3.10.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQ="$REPO/requirements/oat-py310.txt"
KEY=$(cat "$REQ" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)
CACHE=${PRECISION_OAT_CACHE:-$HOME/.cache/precision-oat}
VENV="$CACHE/venv-oat-py310-$KEY"
MARKER="$VENV/.precision-oat-complete"

log() { echo "[oat_env] $*" >&2; }

find_python() {
    if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
    # pyenv's shim answers only when 3.10 is an active version; ask pyenv for the real path.
    if command -v pyenv >/dev/null 2>&1; then
        local v
        v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.10(\.[0-9]+)?$' | sort -V | tail -1 || true)
        if [ -n "$v" ]; then echo "$(pyenv root)/versions/$v/bin/python3.10"; return; fi
    fi
    echo python3.10
}

mkdir -p "$CACHE"
# One builder at a time: a second caller waits here, then finds the marker.
exec 9>"$VENV.lock"
flock 9

if [ ! -f "$MARKER" ]; then
    start=$(date +%s)
    PYTHON=$(find_python)
    "$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 10), sys.version' >&2
    rm -rf "$VENV"
    log "building $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
    PIP=("$VENV/bin/python" -m pip install --progress-bar off --no-deps -c "$REQ")
    "$VENV/bin/python" -m pip install -qq --progress-bar off pip==24.0 >&2
    # Everything but DeepSpeed, whose build needs torch installed first. (-qq: errors only;
    # a pip config with extra local indexes otherwise warns once per package.)
    "${PIP[@]}" -qq -r <(grep -vE '^deepspeed==' "$REQ") >&2
    # Ops are compiled on first use (DS_BUILD_OPS=0); the build imports the venv's torch.
    DS_BUILD_OPS=0 "${PIP[@]}" -qq --no-build-isolation "$(grep -E '^deepspeed==' "$REQ")" >&2
    # The one expected complaint is oat-llm's flash-attn (see the requirements file).
    problems=$("$VENV/bin/python" -m pip check 2>&1 | grep -v 'flash-attn' || true)
    if [ -n "$problems" ]; then
        log "pip check found inconsistent pins:"; echo "$problems" >&2; exit 1
    fi
    "$VENV/bin/python" -c '
import deepspeed, launchpad, oat.algorithms.ppo, torch, vllm
print("oat stack: torch", torch.__version__, "vllm", vllm.__version__, "deepspeed", deepspeed.__version__)
' 2>&1 | tail -1 >&2
    # On a CPU-only machine DeepSpeed's gloo backend compiles a shared-memory op on first use
    # (1-2.5 min); do it now, once, rather than inside the first test. A no-op with CUDA.
    "$VENV/bin/python" -c 'from deepspeed.comm.torch import build_shm_op; build_shm_op()' >/dev/null 2>&1
    touch "$MARKER"
    log "built in $(($(date +%s) - start)) s, $(du -sh "$VENV" | cut -f1)"
fi

# Point the venv at this clone (cheap; skipped when it already does). The core's
# dependencies are all pinned above, hence --no-deps; the build backend is fetched in
# isolation because the project's metadata needs a newer setuptools than the venv's.
# (Asked from / so that the current directory cannot answer in the venv's place.)
where=$(cd / && "$VENV/bin/python" -c 'import os, precision_oat; print(os.path.dirname(os.path.dirname(precision_oat.__file__)))' 2>/dev/null || true)
if [ "$where" != "$REPO" ]; then
    log "installing precision-oat from $REPO (editable)"
    "$VENV/bin/python" -m pip install --quiet --progress-bar off --no-deps -e "$REPO" >&2
fi

echo "$VENV"
