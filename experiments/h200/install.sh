#!/usr/bin/env bash
# On the H200 machine (Python 3.12, torch 2.11.0+cu130, transformers 5.17; no network needed), from the repository
# root, with the folder experiments/h200/wheels.sh filled elsewhere:
#   WHEELS=<folder with the wheels> GGUF=<SmolLM2-135M-Instruct.Q4_1.gguf> bash experiments/h200/install.sh
# installs vLLM and DeepSpeed into $HOME/vsite, converts SmolLM2 to an fp32 HF folder at $HOME/smolhf, and copies
# this repository to $HOME/snap, so that runs started from there are untouched by later changes to the checkout.
# Then start the work in the background as its own command (not in one && chain with this script, whose end would
# take it along):
#   cd $HOME/snap && export PYTHONPATH=$HOME/vsite:$HOME/snap && setsid nohup bash experiments/h200/scale.sh … &
set -euo pipefail
WHEELS=${WHEELS:?set WHEELS to the folder of wheels experiments/h200/wheels.sh downloads}
GGUF=${GGUF:?set GGUF to SmolLM2-135M-Instruct.Q4_1.gguf (experiments/h200/wheels.sh downloads it)}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$HOME/vsite" "$WHEELS"/*.whl
mkdir -p "$HOME/snap" "$HOME/gguf"
tar cf - . | tar xf - -C "$HOME/snap"
cp "$GGUF" "$HOME/gguf/"  # a folder holding the GGUF alone, which the loader reads as the model's
cd "$HOME/snap"
PYTHONPATH="$HOME/vsite:$HOME/snap" python3 experiments/h200/gguf_to_hf.py "$HOME/gguf" "$(basename "$GGUF")" \
  "$HOME/smolhf" 2>&1 | grep -v "it/s"
[ -f "$HOME/smolhf/model.safetensors" ] && echo "installed; SmolLM2 at $HOME/smolhf"
