#!/usr/bin/env bash
# On the device machine, from the repository root, once the bundle's parts are in $HOME/parts
# (../shared/gpu/README.md §2): installs vLLM and DeepSpeed into $HOME/vsite, converts SmolLM2 to an
# fp32 HF folder at $HOME/smolhf, and copies this repository to $HOME/snap, so that runs started
# from there are untouched by later transfers of the working tree. Then start the work in the
# background as its own command (not in one && chain with this script, whose end would take it along):
#   bash experiments/h200/install.sh
#   cd $HOME/snap && export PYTHONPATH=$HOME/vsite:$HOME/snap && setsid nohup bash experiments/h200/scale.sh … &
set -euo pipefail
cat "$HOME"/parts/part* > "$HOME/bundle.tar"
tar xf "$HOME/bundle.tar" -C "$HOME" && rm "$HOME/bundle.tar"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$HOME/vsite" "$HOME"/bundle/w/*.whl
mkdir -p "$HOME/snap" "$HOME/blob"
tar cf - --exclude=./.gpu . | tar xf - -C "$HOME/snap"
mv "$HOME"/bundle/*.gguf "$HOME/blob/"
cd "$HOME/snap"
PYTHONPATH="$HOME/vsite:$HOME/snap" python3 experiments/h200/gguf_to_hf.py "$HOME/blob" SmolLM2-135M-Instruct.Q4_1.gguf \
  "$HOME/smolhf" 2>&1 | grep -v "it/s"
[ -f "$HOME/smolhf/model.safetensors" ] && echo "installed; SmolLM2 at $HOME/smolhf"
