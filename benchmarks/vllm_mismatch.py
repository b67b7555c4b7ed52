"""vLLM-vs-trainer mismatch and sampler speed, per dtype (output: benchmarks/results/vllm_mismatch.txt).

Run in the vLLM venv (``VENV=$(bash scripts/vllm_env.sh | tail -1)``):

    $VENV/bin/python benchmarks/vllm_mismatch.py

What it does:
    1. Trains a small Qwen2 (char vocabulary, ~2.2M parameters) for a fixed number of steps on
       a stream of addition facts ``"17+25=42;…"``: operands are uniform (high entropy), sums and
       separators nearly certain, so the measured distribution has both flat and peaked tokens.
    2. For each sampler dtype d in bf16, fp16, fp32: pushes the fp32 weights into an in-process
       vLLM engine in d, samples 64 prompts × 128 tokens (T = 1, top-p = 1, no stop), and
       rescores the same tokens with one full-sequence transformers forward (the trainer), both
       in d (the paper's setting: sampler and trainer share a dtype) and in fp32.
    3. Reports the ``mismatch/…`` metrics of :mod:`precision_oat.precision.mismatch_metrics` (token mean
       |Δ|, sequence log-ratio std, k3; Δ_t = log π − log μ, ρ = Σ_t Δ_t) and the bf16/fp16
       ratios, for vLLM and for the built-in KV-cache sampler, and the tokens/s of both samplers.

The training helpers here are also the model recipe of ``tests/vllm`` (at a smaller size).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch

CHARS = "0123456789+=;"
SEP = CHARS.index(";")


def encode(text: str) -> list[int]:
    return [CHARS.index(c) for c in text]


def fact_stream(rng: random.Random, length: int, max_operand: int = 99) -> list[int]:
    """``length`` tokens of ``"a+b=c;"`` facts, starting at a fact boundary."""
    ids: list[int] = []
    while len(ids) < length:
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        ids += encode(f"{a}+{b}={a + b};")
    return ids[:length]


def tiny_config(hidden: int = 128, layers: int = 2, max_len: int = 512):
    from transformers import Qwen2Config

    # Head size 32: the smallest vLLM's CPU attention supports.
    heads = hidden // 32
    return Qwen2Config(
        vocab_size=16,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=max_len,
        tie_word_embeddings=True,
        bos_token_id=SEP,
        eos_token_id=SEP,
        pad_token_id=SEP,
    )


def train_tiny_lm(hidden: int = 128, layers: int = 2, steps: int = 200, batch: int = 32, seq_len: int = 64, seed: int = 0):
    """A Qwen2 trained with AdamW on :func:`fact_stream` windows; fp32, eval mode."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = Qwen2ForCausalLM(tiny_config(hidden, layers))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    model.train()
    for _ in range(steps):
        ids = torch.tensor([fact_stream(rng, seq_len) for _ in range(batch)])
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    return model.eval(), loss.item()


def make_prompts(count: int, seed: int = 1, facts: int = 2) -> list[list[int]]:
    """``facts`` whole facts each, so every prompt ends right after a separator."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        text = "".join(f"{a}+{b}={a + b};" for a, b in ((rng.randint(0, 99), rng.randint(0, 99)) for _ in range(facts)))
        prompts.append(encode(text))
    return prompts


@torch.no_grad()
def rescore(model, prompts: list[list[int]], responses: list[list[int]], temperature: float = 1.0) -> list[torch.Tensor]:
    """Trainer log-probs log π(y_t | y_<t) of each response token: one full-sequence forward per row."""
    out = []
    for prompt, response in zip(prompts, responses):
        ids = torch.tensor([prompt + response])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
        out.append(logits.log_softmax(-1).gather(-1, torch.tensor(response)[:, None])[:, 0])
    return out


DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
KEYS = [("mismatch/abs_logp_diff_mean", "|Δlogp| mean"), ("mismatch/seq_logratio_std", "seq log-ratio std"), ("mismatch/k3", "k3")]


def measure(sampler, prompts, params):
    """Completions and tokens/s of one timed call (after a short warm-up call)."""
    sampler.generate(prompts[:4], type(params)(n=1, max_new_tokens=8, seed=0))
    start = time.perf_counter()
    completions = sampler.generate(prompts, params)
    elapsed = time.perf_counter() - start
    return completions, sum(len(c.response_ids) for c in completions) / elapsed


def metrics(completions, trainer) -> dict[str, float]:
    from precision_oat.precision.mismatch_metrics import mismatch_metrics

    pi = rescore(trainer, [c.prompt_ids for c in completions], [c.response_ids for c in completions])
    mu = [torch.tensor(c.logprobs) for c in completions]
    pad = lambda rows: torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)  # noqa: E731
    mask = pad([torch.ones(len(r)) for r in mu])
    return mismatch_metrics(pad(mu), pad(pi), mask)


def table(title: str, rows: dict[str, dict[str, float]]) -> list[str]:
    lines = [title, f"  {'':10}" + "".join(f"{label:>20}" for _, label in KEYS)]
    for dtype, m in rows.items():
        lines.append(f"  {dtype:10}" + "".join(f"{m[key]:20.3e}" for key, _ in KEYS))
    if "bf16" in rows and "fp16" in rows:
        from precision_oat.precision.mismatch_metrics import ratio, times

        lines.append(f"  {'bf16/fp16':10}" + "".join(f"{times(ratio(rows['bf16'][k], rows['fp16'][k])):>20}"
                                                      for k, _ in KEYS))
    return lines


def main():
    import copy
    import platform
    import sys

    import vllm

    from precision_oat.samplers.kv_cache import KVCacheSampler
    from precision_oat.samplers.sampler import SamplingParams
    from precision_oat.samplers.vllm_sampler import VLLMSampler

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=192, help="model width (head size 32)")
    parser.add_argument("--layers", type=int, default=4, help="transformer layers")
    parser.add_argument("--train-steps", type=int, default=200, help="AdamW steps of 32 × 128 tokens")
    parser.add_argument("--prompts", type=int, default=64, help="prompts sampled per dtype")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per response (no stop token)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "vllm_mismatch.txt")
    args = parser.parse_args()

    start = time.time()
    model, loss = train_tiny_lm(args.hidden, args.layers, steps=args.train_steps, batch=32, seq_len=128)
    train_s = time.time() - start
    folder = Path(tempfile.mkdtemp(prefix="vllm-mismatch-"))
    model.save_pretrained(folder)
    prompts = make_prompts(args.prompts)
    params = SamplingParams(n=1, temperature=1.0, top_p=1.0, max_new_tokens=args.tokens, seed=1234)

    results = {name: {} for name in ("vllm_same", "vllm_fp32", "builtin_same", "builtin_fp32")}
    speed = {}
    for name, dtype in DTYPES.items():
        trainer = copy.deepcopy(model).to(dtype)
        engine = VLLMSampler(str(folder), {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[name], kv_cache_gb=1.0)
        engine.load_weights(model.named_parameters())
        vllm_out, vllm_speed = measure(engine, prompts, params)
        builtin_out, builtin_speed = measure(KVCacheSampler(model, dtype, "cpu", pad_token_id=SEP), prompts, params)
        results["vllm_same"][name] = metrics(vllm_out, trainer)
        results["vllm_fp32"][name] = metrics(vllm_out, model)
        results["builtin_same"][name] = metrics(builtin_out, trainer)
        results["builtin_fp32"][name] = metrics(builtin_out, model)
        speed[name] = (builtin_speed, vllm_speed)
        print(name, {k: f"{v[name]['mismatch/abs_logp_diff_mean']:.3e}" for k, v in results.items()}, flush=True)

    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    lines = [
        f"# command: python benchmarks/vllm_mismatch.py {' '.join(sys.argv[1:])}".rstrip(),
        f"# {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}, vllm {vllm.__version__}, "
        f"{time.strftime('%Y-%m-%d')}",
        f"model: Qwen2, {params_m:.2f}M parameters (hidden {args.hidden}, {args.layers} layers), {args.train_steps} AdamW steps "
        f"on addition facts in {train_s:.0f}s, final loss {loss:.3f}",
        f"sampled: {args.prompts} prompts × {args.tokens} tokens per dtype, T = 1, top-p = 1; trainer = one transformers "
        "forward over prompt + response",
        "Δ_t = log π (trainer) − log μ (sampler); token mean |Δ|, std over sequences of ρ = Σ_t Δ_t, k3 = mean(exp Δ − 1 − Δ)",
        "",
    ]
    lines += table("vLLM sampler vs trainer in the same dtype (the paper's setting)", results["vllm_same"]) + [""]
    lines += table("vLLM sampler vs fp32 trainer", results["vllm_fp32"]) + [""]
    lines += table("built-in KV-cache sampler vs trainer in the same dtype", results["builtin_same"]) + [""]
    lines += table("built-in KV-cache sampler vs fp32 trainer", results["builtin_fp32"]) + [""]
    lines += ["sampling speed, tokens/s (one batch of all prompts; the machine may be shared, so noisy)",
              f"  {'':10}{'built-in':>12}{'vLLM':>12}"]
    lines += [f"  {name:10}{b:12.0f}{v:12.0f}" for name, (b, v) in speed.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
