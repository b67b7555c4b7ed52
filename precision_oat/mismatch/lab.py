"""The mismatch lab: measure μ versus π on the same tokens, per dtype, in one command.

For each dtype d: the built-in :class:`~precision_oat.engines.local.sampler.KVCacheSampler`
samples responses in d (its own weight copy, KV-cache decoding), the trainer's
:meth:`~precision_oat.engines.local.learner.PrecisionLearner.score` rescores the same
tokens with one full-sequence forward in d (fp32 master weights cast to d, as in
training), and :func:`~precision_oat.mismatch.mismatch_metrics` compares log μ with
log π. Outputs: ``OUTPUT_DIR/mismatch.json`` and the two figures of the paper's Fig. 5
(token probabilities μ vs π; sequence log-ratio ρ = Σ_t Δ_t against response length).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Optional

import torch

from precision_oat.precision import DType

# Statistics whose bf16/fp16 ratio the lab reports (the paper's headline comparisons).
RATIO_KEYS = ("abs_logp_diff_mean", "seq_logratio_std", "k3", "seq_kl")


@dataclass
class LabArgs:
    """Sample in each dtype, rescore with the trainer's forward, compare μ with π."""

    # HF model id or local folder; None uses the embedded tiny arithmetic policy.
    model: Optional[str] = None
    # GGUF file inside --model to load (dequantised), e.g. SmolLM2-135M-Instruct.Q4_1.gguf.
    gguf_file: Optional[str] = None
    # Prompt file or datasets folder (.jsonl/.parquet/save_to_disk); None uses the arithmetic task's prompts.
    prompt_data: Optional[str] = None
    # Column of --prompt-data holding the prompt.
    input_key: str = "problem"
    # Split of --prompt-data when it is a DatasetDict.
    split: str = "train"
    # Template applied to --prompt-data questions (precision_oat.templates), or "chat".
    prompt_template: str = "no"
    # Largest operand of the arithmetic prompts (when --prompt-data is not given).
    max_operand: int = 49
    # Dtypes to measure; the sampler and the trainer both compute in each.
    dtypes: tuple[DType, ...] = ("bf16", "fp16", "fp32")
    # Prompts to sample from.
    num_prompts: int = 32
    # Samples per prompt.
    num_samples: int = 4
    # Longest response in tokens.
    max_new_tokens: int = 64
    # Sampling temperature (the trainer scores with the same temperature).
    temperature: float = 1.0
    # Seed of the sampler's generator, the same for every dtype.
    seed: int = 0
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Sequences per trainer forward when rescoring.
    micro_batch_size: int = 64
    # Trainer attention kernel ("eager", "sdpa", ...).
    attn_implementation: str = "sdpa"
    # Folder for mismatch.json and the figures.
    output_dir: Path = Path("runs/mismatch")
    # Write the PNG figures (needs matplotlib).
    plots: bool = True


def lab_prompts(args: LabArgs, tokenizer) -> list[str]:
    """The prompt texts: the first ``num_prompts`` of --prompt-data, or of the arithmetic task."""
    if args.prompt_data is None:
        from precision_oat.tasks.arithmetic import ArithmeticTask

        task = ArithmeticTask(max_operand=args.max_operand)
        return [task.render(ex) for ex in task.train_set()[: args.num_prompts]]
    from precision_oat.data import load_examples
    from precision_oat.templates import apply_template

    # The lab needs no reference answers, so the prompt column also serves as the answer column.
    examples = load_examples(args.prompt_data, split=args.split, input_key=args.input_key,
                             output_key=args.input_key, limit=args.num_prompts)
    return [apply_template(args.prompt_template, ex.question, tokenizer) for ex in examples]


def measure_dtype(args: LabArgs, policy, prompt_ids: list[list[int]], dtype: DType, device: torch.device, log=print):
    """Sample in ``dtype``, rescore in ``dtype``; return (metrics, histograms, timings)."""
    from precision_oat.algorithms import compose
    from precision_oat.args import Args, RolloutArgs, TrainArgs, algorithm_spec
    from precision_oat.engines.local.learner import PrecisionLearner
    from precision_oat.engines.local.sampler import KVCacheSampler
    from precision_oat.mismatch import mismatch_histograms, mismatch_metrics
    from precision_oat.precision import Precision
    from precision_oat.rollout import collate
    from precision_oat.sampling import SamplingParams, stop_token_ids

    tokenizer = policy.tokenizer
    precision = Precision.from_flags(dtype)
    stop_ids = stop_token_ids(tokenizer)
    params = SamplingParams(args.num_samples, args.temperature, 1.0, args.max_new_tokens, stop_ids, args.seed)

    sampler = KVCacheSampler(policy.model, precision.sampler_dtype, device, tokenizer.pad_token_id)
    _sync(device)
    start = time.perf_counter()
    completions = sampler.generate(prompt_ids, params)
    _sync(device)
    sample_s = time.perf_counter() - start
    del sampler
    tokens = sum(len(c.response_ids) for c in completions)
    log(f"  [{dtype}] sampled {len(completions)} responses, {tokens} tokens in {sample_s:.1f}s "
        f"({tokens / max(sample_s, 1e-9):.0f} tok/s); rescoring with the trainer's full forward …")

    rollout = collate(completions, [0.0] * len(completions), args.num_samples, tokenizer.pad_token_id)
    train_args = Args(rollout=RolloutArgs(temperature=args.temperature),
                      train=TrainArgs(micro_batch_size=args.micro_batch_size, seed=args.seed))
    train_args.model.attn_implementation = args.attn_implementation
    spec = algorithm_spec(train_args)
    learner = compose(spec, PrecisionLearner)(train_args, copy.deepcopy(policy.model), precision, spec, device)
    start = time.perf_counter()
    trainer_logprobs = learner.score(rollout.to(device)).cpu()
    _sync(device)
    score_s = time.perf_counter() - start
    del learner
    if device.type == "cuda":
        torch.cuda.empty_cache()

    metrics = mismatch_metrics(rollout.sampler_logprobs, trainer_logprobs, rollout.response_mask)
    histograms = mismatch_histograms(rollout.sampler_logprobs, trainer_logprobs, rollout.response_mask)
    lengths = histograms["mismatch/seq_length"]
    extra = {
        "sequences": len(completions),
        "response_tokens": tokens,
        "response_length_mean": float(lengths.mean()) if len(lengths) else 0.0,
        "finished_frac": sum(c.finished for c in completions) / max(len(completions), 1),
        "sample_s": sample_s,
        "score_s": score_s,
        "sample_tokens_per_s": tokens / max(sample_s, 1e-9),
    }
    log(f"  [{dtype}] mean |Δlogp| {metrics['mismatch/abs_logp_diff_mean']:.3e}  "
        f"seq log-ratio std {metrics['mismatch/seq_logratio_std']:.3e}  k3 {metrics['mismatch/k3']:.3e}  "
        f"seq KL {metrics['mismatch/seq_kl']:.3e}")
    return {**metrics, **extra}, histograms


def run_lab(args: LabArgs, log=print) -> dict:
    """Measure every dtype of ``args``; write mismatch.json (and figures); return its content."""
    from precision_oat.args import ModelArgs
    from precision_oat.engines.local.loop import resolve_device
    from precision_oat.models import load_policy

    if not args.dtypes:
        raise ValueError("--dtypes: give at least one of bf16, fp16, fp32")
    device = resolve_device(args.device)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    policy = load_policy(ModelArgs(model=args.model, gguf_file=args.gguf_file,
                                   attn_implementation=args.attn_implementation), log)
    prompts = lab_prompts(args, policy.tokenizer)
    if not prompts:
        raise ValueError("no prompts to sample from")
    prompt_ids = [policy.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    log(f"mismatch lab · {args.model or 'embedded arithmetic policy'} · device {device} · {len(prompts)} prompts × "
        f"{args.num_samples} samples · ≤{args.max_new_tokens} new tokens · T={args.temperature}")

    results, histograms = {}, {}
    for dtype in args.dtypes:
        log(f"{dtype}: sampling with the KV-cache sampler …")
        results[dtype], histograms[dtype] = measure_dtype(args, policy, prompt_ids, dtype, device, log)

    report = {
        "settings": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
                     "device": str(device), "torch": torch.__version__,
                     "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
        "dtypes": results,
        "ratios": bf16_fp16_ratios(results),
    }
    (out / "mismatch.json").write_text(json.dumps(report, indent=2))
    if report["ratios"]:
        log("bf16/fp16: " + "  ".join(f"{k} {v:.1f}x" for k, v in report["ratios"].items()))
    if args.plots:
        from precision_oat.mismatch.plots import plot_seq_logratio, plot_token_probs

        plot_token_probs(histograms, out / "token_probs.png")
        plot_seq_logratio(histograms, results, out / "seq_logratio.png")
    log(f"wrote {out / 'mismatch.json'}" + (", token_probs.png, seq_logratio.png" if args.plots else ""))
    return report


def bf16_fp16_ratios(results: dict[str, dict]) -> dict[str, float]:
    """bf16 / fp16 of each statistic in :data:`RATIO_KEYS` (empty unless both were measured)."""
    if "bf16" not in results or "fp16" not in results:
        return {}
    ratios = {}
    for key in RATIO_KEYS:
        num, den = results["bf16"][f"mismatch/{key}"], results["fp16"][f"mismatch/{key}"]
        ratios[key] = num / den if den != 0 else float("inf")
    return ratios


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
