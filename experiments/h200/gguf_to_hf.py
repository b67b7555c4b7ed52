"""Load SmolLM2-135M-Instruct from its GGUF through ``load_policy`` and save it as an fp32 HF folder.

    python experiments/h200/gguf_to_hf.py GGUF_DIR GGUF_FILE OUT_DIR

Every later process then loads the folder in seconds instead of dequantising the GGUF again.
"""

import sys

from precision_oat.args import ModelArgs
from precision_oat.samplers.decoder import supports
from precision_oat.models import load_policy

folder, name, out = sys.argv[1:4]
policy = load_policy(ModelArgs(model=folder, gguf_file=name))
config = policy.model.config
print(f"{config.model_type}: {sum(p.numel() for p in policy.model.parameters()):,} parameters, "
      f"{config.num_hidden_layers} layers, rope {getattr(config, 'rope_scaling', None)}, "
      f"built-in decoder supports it: {supports(config)}", flush=True)
# The weights are saved dequantised; a GGUF quantisation entry left in config.json would make
# transformers flag the reloaded folder as quantised again.
if getattr(config, "quantization_config", None) is not None:
    del config.quantization_config
policy.model.save_pretrained(out)
policy.tokenizer.save_pretrained(out)
