"""The embedded default workload: two-number addition with an exact-match reward.

It needs no download: the tokenizer is a character vocabulary and the policy a tiny
Qwen2 built from a config and warmed up by a short supervised run (cached on disk), so
that RL starts from a partly competent policy (reward ≈ 0.2–0.8) and visibly improves it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from pathlib import Path
from typing import Sequence

import torch

from precision_oat.errors import UserError
from precision_oat.tasks.task import Example, Task

# The --prompt-template values of this task: the raw sum, worked examples first, or the tokenizer's chat format.
ARITHMETIC_TEMPLATES = ("no", "fewshot", "chat")
VOCAB = ["<pad>", "<eos>", *"0123456789+="]
FEWSHOT = "3+4=7\n12+25=37\n8+9=17\n41+6=47\n"
PAD, EOS = "<pad>", "<eos>"


class ArithmeticTask(Task):
    """``"a+b="`` → ``"c"``; reward 1 when the response starts with the sum, else 0.

    Only the leading integer counts, so a pretrained model that keeps talking after the
    answer is graded on the answer alone.
    """

    name = "arithmetic"

    # A small training set, revisited every few steps, as in the paper's sanity test: can
    # the algorithm fit problems the policy can already partly solve?
    def __init__(self, max_operand: int = 49, num_train: int = 256, num_eval: int = 200, seed: int = 1234,
                 template: str = "no", tokenizer=None):
        if template not in ARITHMETIC_TEMPLATES:
            raise UserError(
                f"--prompt-template {template}: the arithmetic task takes 'no' (raw \"a+b=\"), 'fewshot' or 'chat'"
            )
        if template == "chat" and getattr(tokenizer, "chat_template", None) is None:
            raise UserError(
                "--prompt-template chat: the tokenizer has no chat template; use --prompt-template no or fewshot, "
                "or a --model/--tokenizer that ships one"
            )
        self.template, self.tokenizer = template, tokenizer
        total = (max_operand + 1) ** 2
        num_eval = min(num_eval, total // 5)
        num_train = min(num_train, total - num_eval)
        rng = random.Random(seed)
        pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
        rng.shuffle(pairs)
        examples = [Example(f"{a}+{b}=", str(a + b)) for a, b in pairs]
        self._train = examples[:num_train]
        self._eval = examples[num_train : num_train + num_eval]

    def train_set(self) -> list[Example]:
        return self._train

    def eval_sets(self) -> dict[str, list[Example]]:
        return {"addition": self._eval} if self._eval else {}

    def render(self, example: Example) -> str:
        if self.template == "no":
            return example.question
        if self.template == "fewshot":
            # Worked sums teach a pretrained LM the format: it answers with the number.
            return FEWSHOT + example.question
        # Instruct models answer a question in their chat format; the reward reads the leading integer.
        message = f"What is {example.question.rstrip('=')}? Reply with the number only."
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], add_generation_prompt=True, tokenize=False
        )

    def rewards(self, responses: Sequence[str], examples: Sequence[Example], truncated: Sequence[bool]) -> list[float]:
        return [float(_leading_integer(r) == ex.reference) for r, ex in zip(responses, examples)]


def _leading_integer(text: str) -> str | None:
    match = re.match(r"\s*(-?\d+)", text)
    return match.group(1) if match else None


def char_tokenizer():
    """A character-level HF fast tokenizer over :data:`VOCAB` (saveable, loadable offline)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token=PAD))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS)


def tiny_qwen2_config(vocab_size: int = len(VOCAB), hidden: int = 64, layers: int = 2):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        # Head size 32: the smallest vLLM's CPU attention supports.
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=VOCAB.index(PAD),
        eos_token_id=VOCAB.index(EOS),
        bos_token_id=VOCAB.index(EOS),
    )


# Warm-up settings; changing any of them changes the cache key.
WARMUP = dict(hidden=64, layers=2, steps=300, batch=128, lr=3e-3, seed=0, max_operand=49, version=2)


def warmup_cache_dir() -> Path:
    root = Path(os.environ.get("PRECISION_OAT_CACHE", Path.home() / ".cache" / "precision-oat"))
    key = hashlib.sha256(json.dumps(WARMUP, sort_keys=True).encode()).hexdigest()[:12]
    return root / f"arithmetic-policy-{key}"


def embedded_policy(log=print) -> Path:
    """Folder of the warmed-up tiny policy (model + tokenizer), trained once and cached."""
    folder = warmup_cache_dir()
    if (folder / "config.json").is_file():
        return folder
    log(f"warming up the embedded arithmetic policy (once; cached in {folder}) …")
    start = time.time()
    model, tokenizer = supervised_warmup(**{k: v for k, v in WARMUP.items() if k != "version"})
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.replace(folder) if not folder.exists() else None
    log(f"warm-up done in {time.time() - start:.0f}s")
    return folder


def supervised_warmup(hidden: int, layers: int, steps: int, batch: int, lr: float, seed: int, max_operand: int):
    """Teacher-forced training on sums, stopped early so the policy is right only part of the time."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    tokenizer = char_tokenizer()
    model = AutoModelForCausalLM.from_config(tiny_qwen2_config(hidden=hidden, layers=layers))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    train = ArithmeticTask(max_operand=max_operand, num_train=2000).train_set()
    rng = random.Random(seed)
    for _ in range(steps):
        rows = [ex.question + ex.reference for ex in rng.sample(train, batch)]
        enc = tokenizer([r + EOS for r in rows], return_tensors="pt", padding=True)
        labels = enc.input_ids.masked_fill(enc.attention_mask == 0, -100)
        # Only the answer is supervised: the model must learn to add, not to recite prompts.
        for i, ex in enumerate(rows):
            labels[i, : len(ex) - len(ex.split("=")[1])] = -100
        loss = model(**enc, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), tokenizer
