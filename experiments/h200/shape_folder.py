"""A random-weight model of one of benchmarks/scale_ladder.py's shapes with another model's tokenizer, as an HF folder.

    python experiments/h200/shape_folder.py qwen2.5-1.5b <SmolLM2 HF folder> <output folder>

The shape's vocabulary becomes the tokenizer's (SmolLM2: 49,152), so the real command can run the shape on
a task's text; its end-of-sequence and padding ids are the tokenizer's. Weights saved in bf16, as the
ladder saves its models (the learner's fp32 masters start from them).
"""

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from scale_ladder import build_config  # noqa: E402

shape, tokenizer_folder, out = sys.argv[1:4]
tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
config = build_config(shape)
config.vocab_size = len(tokenizer)
config.eos_token_id = tokenizer.eos_token_id
config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
config.bos_token_id = tokenizer.bos_token_id
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config)
model.save_pretrained(out, state_dict={k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
tokenizer.save_pretrained(out)
print(f"{shape}: {sum(p.numel() for p in model.parameters()):,} parameters, vocabulary {config.vocab_size}, "
      f"saved at {out}", flush=True)
