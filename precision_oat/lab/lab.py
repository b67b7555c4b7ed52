"""The mismatch lab: measure μ versus π on the same tokens, per dtype, for any sampler–trainer pair.

For each dtype d: the sampler (``--sampler builtin``: our KV-cache decoder on its own weight
copy; ``--sampler vllm``: an in-process vLLM engine) samples responses in d, the trainer
(``--trainer hf``: the HF model cast to d; ``--trainer deepspeed``: a DeepSpeed engine built
from ``Precision.deepspeed_config()``) rescores the same tokens with one full-sequence forward
per micro-batch in d, and :func:`~precision_oat.precision.mismatch_metrics.mismatch_metrics` compares
log μ with log π. No learner is built: scoring needs only the model.

The trainer's self-consistency is measured too: the same tokens scored at a second, smaller
micro-batch size, and by the update path (a forward with the gradient enabled, in training
mode), against the no-grad scoring. In exact arithmetic both gaps are 0; what they are in d is
the floor that batch layout and kernel choice alone put under every sampler-vs-trainer number.

An arm ``<dtype>+fp32head`` (``bf16+fp32head``, ``fp16+fp32head``) runs both sides in the dtype
with the final projection and the logits in fp32 (``--lm-head-dtype fp32``), so the lab measures
bf16, bf16 with an fp32 head, fp16 and fp32 side by side. The arm ``fp8`` samples with vLLM's linear
layers in FP8 (``--sampler-dtype fp8``, the rest bf16) and scores in bf16. ``--batch-invariant`` runs
every arm on vLLM's batch-invariant kernels (both sides; the kernels stay for the whole process,
so a comparison with and without takes two runs of the lab).

Each arm also reports the bands IcePop and the geometric mask would need on that pair
(:mod:`~precision_oat.lab.mask_bands`).

Outputs: ``OUTPUT_DIR/mismatch.json`` and the two figures of the paper's Fig. 5 (token
probabilities μ vs π; sequence log-ratio ρ = Σ_t Δ_t against response length). A run first removes
those of a previous run from OUTPUT_DIR (:data:`LAB_FILES`), so the folder never mixes two runs.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Literal, Optional

import numpy as np
import torch

from precision_oat import checks
from precision_oat.errors import UserError
from precision_oat.lab.mask_bands import describe as describe_bands, mask_bands
from precision_oat.lab.prompts import PromptSource, check_prompt_source, load_prompts
from precision_oat.precision.lm_head import use_fp32_head
from precision_oat.precision.mismatch_metrics import ratio, times
from precision_oat.rl.scoring import DEFAULT_CHUNK_SIZE, score, token_logprobs, trim

# Statistics whose bf16/fp16 ratio the lab reports (the paper's headline comparisons).
RATIO_KEYS = ("abs_logp_diff_mean", "seq_logratio_std", "k3", "seq_kl")
# What the lab can measure: a dtype for both sides, or that dtype with an fp32 lm_head and fp32 logits;
# fp8 samples with FP8 linear layers (the rest bf16) and scores in bf16.
FP32_HEAD = "+fp32head"
LabArm = Literal["fp8", "bf16", "fp16", "fp32", "fp8+fp32head", "bf16+fp32head", "fp16+fp32head"]
LAB_FILES = ("mismatch.json", "histograms.npz", "token_probs.png", "seq_logratio.png", "atlas.png")
"""What the lab writes into its --output-dir; a new run removes a previous run's before it measures."""


@dataclass
class PairSettings:
    """What one measurement needs besides the policy and the prompts."""

    # Sampler: the built-in KV-cache decoder or an in-process vLLM engine.
    sampler: Literal["builtin", "vllm"] = "builtin"
    # Trainer that rescores: the HF model in the dtype, or a DeepSpeed engine.
    trainer: Literal["hf", "deepspeed"] = "hf"
    # Samples per prompt.
    num_samples: int = 4
    # Longest response in tokens.
    max_new_tokens: int = 64
    # Sampling temperature, at least 0.01 (the trainer scores with the same temperature).
    temperature: float = 1.0
    # Seed of the sampler's draws, the same for every dtype.
    seed: int = 0
    # Sequences per trainer forward when rescoring.
    micro_batch_size: int = 64
    # Response positions whose fp32 log-softmax over the vocabulary is taken at once when rescoring.
    logprob_chunk_size: int = DEFAULT_CHUNK_SIZE
    # Also measure the trainer against itself (second micro-batch size, update path).
    self_consistency: bool = False
    # vLLM: fraction of GPU memory for each engine (one engine per dtype stays alive).
    vllm_gpu_memory_utilization: float = 0.2
    # vLLM: no CUDA graphs (starts faster, decodes slower).
    vllm_enforce_eager: bool = False
    # vLLM on CUDA: batch-invariant kernels for the sampler and the trainer (the whole process).
    batch_invariant: bool = False

    def rollout_args(self, longest_prompt: int):
        """The sampler's settings. Its engines never sleep: every arm's engine stays alive in this one process,
        and vLLM's sleep-mode allocator serves a single engine per process."""
        from precision_oat.args import RolloutArgs

        return RolloutArgs(sampler=self.sampler, max_new_tokens=self.max_new_tokens, max_prompt_length=longest_prompt,
                           vllm_gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                           vllm_enforce_eager=self.vllm_enforce_eager, vllm_sleep=False)


@dataclass
class LabArgs(PairSettings, PromptSource):
    """Sample in each dtype, rescore with the trainer's forward, compare μ with π."""

    # Dtypes to measure; the sampler and the trainer both compute in each ("+fp32head": lm_head and logits in fp32).
    dtypes: tuple[LabArm, ...] = ("bf16", "fp16", "fp32")
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Trainer attention kernel ("eager", "sdpa", ...).
    attn_implementation: str = "sdpa"
    # Folder for mismatch.json and the figures.
    output_dir: Path = Path("runs/mismatch")
    # Write the PNG figures (needs matplotlib).
    plots: bool = True
    # Measure the trainer against itself too (overrides the pair default).
    self_consistency: bool = True


def arm_precision(arm: str, batch_invariant: bool = False):
    """The :class:`~precision_oat.precision.policy.Precision` of a lab arm such as ``bf16``, ``bf16+fp32head`` or
    ``fp8``."""
    from precision_oat.precision.policy import Precision

    dtype = arm.removesuffix(FP32_HEAD)
    fp8 = dtype == "fp8"
    return Precision.from_flags("bf16" if fp8 else dtype, sampler_dtype="fp8" if fp8 else None,
                                lm_head_dtype="fp32" if arm.endswith(FP32_HEAD) else "same",
                                batch_invariant=batch_invariant)


def measure_pair(pair: PairSettings, policy, prompt_ids: list[list[int]], dtype: str, device: torch.device,
                 log=print, folder: Optional[Path] = None):
    """Sample in ``dtype`` (a lab arm), rescore in ``dtype``; return (metrics, histograms)."""
    from precision_oat.precision.mismatch_metrics import mismatch_breakdown, mismatch_histograms, mismatch_metrics
    from precision_oat.rl.rollout import collate
    from precision_oat.samplers import build_sampler
    from precision_oat.samplers.sampler import SamplingParams, stop_token_ids

    tokenizer = policy.tokenizer
    precision = arm_precision(dtype, pair.batch_invariant)
    params = SamplingParams(pair.num_samples, pair.temperature, 1.0, pair.max_new_tokens, stop_token_ids(tokenizer),
                            pair.seed)
    sampler = build_sampler(policy, precision, device, pair.rollout_args(max(len(p) for p in prompt_ids)), pair.seed,
                            folder=folder)
    _sync(device)
    start = time.perf_counter()
    completions = sampler.generate(prompt_ids, params)
    _sync(device)
    sample_s = time.perf_counter() - start
    del sampler
    tokens = sum(len(c.response_ids) for c in completions)
    log(f"  [{dtype}] sampled {len(completions)} responses, {tokens} tokens in {sample_s:.1f}s "
        f"({tokens / max(sample_s, 1e-9):.0f} tok/s); rescoring with the {pair.trainer} trainer …")

    rollout = collate(completions, [0.0] * len(completions), pair.num_samples, tokenizer.pad_token_id)
    trainer = build_trainer(pair.trainer, policy.model, precision, device, pair.micro_batch_size)
    forward = partial(token_logprobs, trainer, temperature=pair.temperature, chunk_size=pair.logprob_chunk_size)
    ids, att = rollout.input_ids.to(device), rollout.attention_mask.to(device)
    response = rollout.response_mask.to(device)
    start = time.perf_counter()
    trainer_logprobs = score(forward, ids, att, pair.micro_batch_size, response_mask=response).cpu()
    _sync(device)
    score_s = time.perf_counter() - start
    consistency = trainer_self_gaps(forward, trainer, ids, att, trainer_logprobs, response, pair) \
        if pair.self_consistency else {}
    del trainer, forward
    if device.type == "cuda":
        torch.cuda.empty_cache()

    metrics = mismatch_metrics(rollout.sampler_logprobs, trainer_logprobs, rollout.response_mask)
    metrics.update(mismatch_breakdown(rollout.sampler_logprobs, trainer_logprobs, rollout.response_mask))
    histograms = mismatch_histograms(rollout.sampler_logprobs, trainer_logprobs, rollout.response_mask)
    metrics.update(mask_bands(histograms))
    lengths = histograms["mismatch/seq_length"]
    extra = {
        "sequences": len(completions),
        "response_tokens": tokens,
        "response_length_mean": float(lengths.mean()) if len(lengths) else 0.0,
        "finished_frac": sum(c.finished for c in completions) / max(len(completions), 1),
        "sample_s": sample_s,
        "score_s": score_s,
        "sample_tokens_per_s": tokens / max(sample_s, 1e-9),
        **consistency,
    }
    log(f"  [{dtype}] mean |Δlogp| {metrics['mismatch/abs_logp_diff_mean']:.3e}  "
        f"seq log-ratio std {metrics['mismatch/seq_logratio_std']:.3e}  k3 {metrics['mismatch/k3']:.3e}  "
        f"seq KL {metrics['mismatch/seq_kl']:.3e}"
        + "".join(f"  {k.split('/')[-1]} {v:.2e}" for k, v in consistency.items() if k.endswith("abs_mean")))
    if "band/geo_ratio_low" in metrics:
        for line in describe_bands(metrics):
            log(f"  [{dtype}] {line}")
    return {**metrics, **extra}, histograms


def build_trainer(kind: str, model, precision, device: torch.device, micro_batch_size: int):
    """A scoring copy of ``model`` in the trainer dtype: the HF model itself, or wrapped in a DeepSpeed engine."""
    copy_ = copy.deepcopy(model).float()
    if kind == "deepspeed":
        from precision_oat.learners.deepspeed_config import inference_engine

        return inference_engine(copy_, precision, device, micro_batch_size)
    copy_ = copy_.to(device=device, dtype=precision.trainer_dtype).eval()
    return use_fp32_head(copy_) if precision.fp32_head else copy_


def trainer_self_gaps(forward, trainer, input_ids, attention_mask, reference, mask, pair: PairSettings) -> dict:
    """|Δ| between the no-grad scoring and (a) the same scoring in micro-batches of a quarter of the rows the first
    scored per forward, (b) the update path's forward (gradient on, training mode) at the same micro-batch size."""
    # A quarter of --micro-batch-size alone would, with fewer rows than that, score them in one forward again.
    small = max(1, min(pair.micro_batch_size, input_ids.shape[0]) // 4)
    at_small = score(forward, input_ids, attention_mask, small, response_mask=mask).cpu()
    trainer.train()
    with torch.enable_grad():
        update_path = torch.zeros_like(reference)
        for index in torch.arange(input_ids.shape[0]).split(pair.micro_batch_size):
            ids, att = trim(input_ids[index], attention_mask[index])
            width = ids.shape[1] - 1
            update_path[index, :width] = forward(ids, att, response_mask=mask[index, :width]).detach().float().cpu()
    trainer.eval()
    mask = mask.cpu()
    out = {}
    for name, other in (("microbatch", at_small), ("update_path", update_path)):
        gap = (other - reference).abs() * mask
        out[f"trainer/{name}_gap_abs_mean"] = float(gap.sum() / mask.sum().clamp(min=1))
        out[f"trainer/{name}_gap_abs_max"] = float(gap.max())
    out["trainer/microbatch_small"] = small
    return out


def check_lab_args(args: LabArgs) -> None:
    """Refuse, before anything is loaded or written, what cannot run here, naming the lab's own flags."""
    from precision_oat import stacks
    from precision_oat.args import MIN_TEMPERATURE, MIN_TEMPERATURE_WHY
    from precision_oat.learners.deepspeed_config import deepspeed_refuses
    from precision_oat.models import resolve_device

    check_prompt_source(args)
    checks.integer(args, "num_samples", 1)
    checks.integer(args, "max_new_tokens", 1)
    checks.number(args, "temperature", ge=MIN_TEMPERATURE, why=MIN_TEMPERATURE_WHY)
    checks.integer(args, "micro_batch_size", 1)
    checks.integer(args, "logprob_chunk_size", 1)
    checks.number(args, "vllm_gpu_memory_utilization", gt=0, le=1, why="a fraction of the GPU's memory")
    checks.folder(args, "output_dir")
    if not args.dtypes:
        raise UserError("--dtypes: give at least one of fp8, bf16, fp16, fp32, bf16+fp32head, fp16+fp32head")
    repeated = sorted({d for d in args.dtypes if args.dtypes.count(d) > 1})
    if repeated:
        raise UserError(f"--dtypes {' '.join(args.dtypes)}: {', '.join(repeated)} given more than once; mismatch.json "
                        "keeps one result per arm, so name each arm once (and run the lab again to repeat one)")
    for what, chosen in (("--dtypes fp8", any(d.startswith("fp8") for d in args.dtypes)),
                         ("--batch-invariant", args.batch_invariant)):
        if chosen and args.sampler != "vllm":
            raise UserError(f"{what} is a vLLM kernel choice; add --sampler vllm")
    flags = {}
    if args.sampler == "vllm":
        flags["vllm"] = ("--sampler vllm", "--sampler builtin")
    if args.trainer == "deepspeed":
        flags["deepspeed"] = ("--trainer deepspeed", "--trainer hf")
    stacks.require_all(flags)
    device = resolve_device(args.device)
    if device.type != "cuda" and (args.batch_invariant or any(d.startswith("fp8") for d in args.dtypes)):
        raise UserError(f"--dtypes {' '.join(args.dtypes)}{' --batch-invariant' if args.batch_invariant else ''}: "
                        "vLLM's FP8 and batch-invariant kernels run on CUDA only; measure them on a CUDA GPU")
    refused = [d for d in args.dtypes
               if args.trainer == "deepspeed" and deepspeed_refuses(arm_precision(d).trainer, device)]
    if refused:
        kept = [d for d in args.dtypes if d not in refused] or ["bf16", "fp32"]
        raise UserError(f"--trainer deepspeed --dtypes {' '.join(args.dtypes)}: DeepSpeed refuses fp16 without a CUDA "
                        f"device; use --dtypes {' '.join(kept)}, or --trainer hf to measure fp16 here")


def run_lab(args: LabArgs, log=print) -> dict:
    """Measure every dtype of ``args``; write mismatch.json (and figures); return its content."""
    from precision_oat.args import ModelArgs
    from precision_oat.models import load_policy, resolve_device
    from precision_oat.runs.folder import make_output_dir

    check_lab_args(args)
    device = resolve_device(args.device)
    if args.batch_invariant:
        from precision_oat.precision.batch_invariance import enable_batch_invariance

        enable_batch_invariance()
    out = make_output_dir(Path(args.output_dir))
    policy = load_policy(ModelArgs(model=args.model, gguf_file=args.gguf_file,
                                   attn_implementation=args.attn_implementation), log)
    prompts = load_prompts(args, policy.tokenizer)
    if not prompts:
        raise UserError("--prompt-data: no prompts to sample from")
    prompt_ids = [policy.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    log(f"mismatch lab · {args.model or 'embedded arithmetic policy'} · sampler {args.sampler} · trainer {args.trainer} · "
        f"device {device}{' · batch-invariant kernels' if args.batch_invariant else ''} · {len(prompts)} prompts × "
        f"{args.num_samples} samples · ≤{args.max_new_tokens} new tokens · T={args.temperature}")

    settings = {**{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
                "device": str(device), "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None}
    # A previous run's figures and histograms would otherwise sit beside this run's mismatch.json as its own
    # (figures this run skips, arms it does not measure, and all of them when it stops part way).
    previous = [name for name in LAB_FILES if (out / name).exists()]
    for name in previous:
        (out / name).unlink()
    if previous:
        log(f"removed the previous lab run's {', '.join(previous)} from {out}")
    results, histograms = {}, {}
    for dtype in args.dtypes:
        log(f"{dtype}: sampling with the {args.sampler} sampler …")
        results[dtype], histograms[dtype] = measure_pair(args, policy, prompt_ids, dtype, device, log, out / "vllm_init")
        # Rewritten after every arm, so that a run stopped part way keeps the arms it measured.
        report = {"settings": settings, "dtypes": results, "ratios": bf16_fp16_ratios(results)}
        (out / "mismatch.json").write_text(json.dumps(report, indent=2))
    # The figures' raw data, so they can be redrawn where matplotlib is (lab.plots.load_histograms).
    np.savez_compressed(out / "histograms.npz", **{f"{d}|{k}": np.asarray(v) for d, h in histograms.items()
                                                   for k, v in h.items()})
    if report["ratios"]:
        log("bf16/fp16: " + "  ".join(f"{k} {times(v)}" for k, v in report["ratios"].items()))
    figures = []
    if args.plots:
        from precision_oat.lab.plots import plot_atlas, plot_seq_logratio, plot_token_probs

        plot_token_probs(histograms, out / "token_probs.png")
        plot_seq_logratio(histograms, results, out / "seq_logratio.png")
        figures = ["token_probs.png", "seq_logratio.png"]
        if len(results) > 1:
            plot_atlas(labelled_arms(report), out / "atlas.png")
            figures.append("atlas.png")
    log(", ".join([f"wrote {out / 'mismatch.json'}", *figures]))
    return report


def labelled_arms(report: dict) -> dict[str, dict]:
    """The arms of a saved lab report by the names tables and figures give them: the arm, marked when the lab ran
    vLLM's batch-invariant kernels."""
    invariant = " (batch-invariant)" if report["settings"].get("batch_invariant") else ""
    return {arm + invariant: metrics for arm, metrics in report["dtypes"].items()}


def bf16_fp16_ratios(results: dict[str, dict]) -> dict[str, float]:
    """bf16 / fp16 of each statistic in :data:`RATIO_KEYS` (empty unless both were measured): inf when only fp16's
    is 0, nan (undefined) when both are."""
    if "bf16" not in results or "fp16" not in results:
        return {}
    ratios = {}
    for key in RATIO_KEYS:
        ratios[key] = ratio(results["bf16"][f"mismatch/{key}"], results["fp16"][f"mismatch/{key}"])
    return ratios


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
