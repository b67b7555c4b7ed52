"""The embedded RL loop, top to bottom: one process, CPU or one GPU.

    prompts → G samples (sampler dtype, KV cache) → rewards → advantages
            → learner update (trainer dtype, fp32 masters) → weights cast into the sampler
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from pathlib import Path

import torch

from precision_oat.algorithms import compose
from precision_oat.args import Args, algorithm_spec
from precision_oat.engines.local.actor import PrecisionActor
from precision_oat.engines.local.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from precision_oat.engines.local.learner import PrecisionLearner
from precision_oat.evaluation import summarize
from precision_oat.mismatch import mismatch_histograms
from precision_oat.models import load_policy
from precision_oat.presets import to_values
from precision_oat.run_log import RunLog
from precision_oat.sampling import SamplingParams
from precision_oat.tasks import Task, build_task

SUMMARY_KEYS = ["mismatch/abs_logp_diff_mean", "mismatch/seq_logratio_std", "mismatch/k3", "mismatch/k1"]


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible")
    return torch.device("cuda" if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()) else "cpu")


def output_dir_for(args: Args) -> Path:
    if args.log.output_dir is not None:
        return Path(args.log.output_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{args.algorithm.algo}-{args.precision.dtype}-{stamp}"


def build_sampler(args: Args, policy, precision, device):
    if args.rollout.sampler == "vllm":
        from precision_oat.engines.local.vllm_sampler import sampler_from_args

        return sampler_from_args(args, policy, precision)
    from precision_oat.engines.local.sampler import KVCacheSampler

    return KVCacheSampler(policy.model, precision.sampler_dtype, device, policy.tokenizer.pad_token_id)


def check_prompts(task: Task, actor: PrecisionActor, limit: int) -> list:
    examples = task.train_set()
    if not examples:
        raise ValueError(f"task {task.name!r} has no training examples")
    too_long = [n for n in (len(actor.encode(e)) for e in examples) if n > limit]
    if too_long:
        raise ValueError(
            f"{len(too_long)} of {len(examples)} prompts are longer than --max-prompt-length {limit} tokens "
            f"(longest {max(too_long)}); raise the limit or filter the data"
        )
    return examples


def evaluate(actor: PrecisionActor, task: Task, args: Args, step: int) -> dict[str, float]:
    e, r = args.eval, args.rollout
    params = SamplingParams(
        e.eval_samples, e.eval_temperature, e.eval_top_p, e.eval_max_new_tokens or r.max_new_tokens,
        actor.stop_ids, args.train.seed + 7_919 * (step + 1),
    )
    results = {}
    for name, examples in task.eval_sets().items():
        completions, texts = actor.sample(examples, params)
        correct = task.correctness(texts, [ex for ex in examples for _ in range(params.n)])
        samples = [(ok, len(c.response_ids)) for ok, c in zip(correct, completions)]
        results[name] = [samples[i : i + params.n] for i in range(0, len(samples), params.n)]
    return summarize(results) if results else {}


def train(args: Args) -> dict:
    """Run the loop; return the summary (also printed and written to OUTPUT_DIR/summary.json)."""
    # Everything that can be wrong with the arguments fails here, before any model loads.
    precision = args.precision.build()
    spec = algorithm_spec(args)
    device = resolve_device(args.train.device)
    out = output_dir_for(args)
    if args.log.resume and latest_checkpoint(out) is None:
        raise ValueError(f"--resume: no checkpoint in {out / 'checkpoints'}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(to_values(dataclasses.replace(args, log=dataclasses.replace(
        args.log, output_dir=out))), indent=2))
    print(f"precision-oat · backend local · algo {args.algorithm.algo} ({spec.advantage} / {spec.objective} / "
          f"{spec.correction} / {spec.reduction}) · device {device}\nprecision policy:\n{precision.describe()}",
          flush=True)

    torch.manual_seed(args.train.seed)
    random.seed(args.train.seed)
    policy = load_policy(args.model)
    task = build_task(args, policy.tokenizer)
    # The sampler copies the fp32 weights first; the learner then takes the model over (it
    # casts it in place and may wrap it with LoRA).
    sampler = build_sampler(args, policy, precision, device)
    learner = compose(spec, PrecisionLearner)(args, policy.model, precision, spec, device)
    actor = PrecisionActor(args, sampler, task, policy.tokenizer)
    examples = check_prompts(task, actor, args.rollout.max_prompt_length)

    start_step = 0
    if args.log.resume:
        folder = latest_checkpoint(out)
        start_step = load_checkpoint(folder, learner)
        sampler.load_weights(learner.export_weights())
        print(f"resumed from {folder} at step {start_step}", flush=True)

    log = RunLog(out, to_values(args), wandb_mode=args.log.wandb_mode, project=args.log.wandb_project,
                 run_name=args.log.run_name or out.name, resume=args.log.resume)
    steps, per_step = args.train.steps, args.rollout.prompts_per_step
    if steps == 0:
        return evaluate_only(actor, task, args, log, out)
    for step in range(start_step, steps):
        batch = _epoch_order(examples, step, per_step, args.train.seed)
        rollout, metrics = actor.rollout(batch, step)
        metrics.update(learner.learn(rollout, step))
        sampler.load_weights(learner.export_weights())
        metrics["step"] = step + 1
        if args.eval.eval_every and ((step + 1) % args.eval.eval_every == 0 or step + 1 == steps):
            metrics.update(evaluate(actor, task, args, step + 1))
        histograms = None
        if log.wandb is not None:
            histograms = mismatch_histograms(rollout.sampler_logprobs, learner.old_logprobs.cpu(), rollout.response_mask)
        log.log(metrics, histograms, total_steps=steps,
                echo=(step + 1) % args.log.log_every == 0 or step + 1 == steps)
        if (args.log.save_every and (step + 1) % args.log.save_every == 0) or step + 1 == steps:
            save_checkpoint(out, step + 1, learner, policy.tokenizer)
    log.close()
    probe = probe_mismatch(learner, actor, examples, args, device) if args.log.probe_dtypes and steps else {}
    if probe:
        (out / "mismatch_probe.json").write_text(json.dumps(probe, indent=2))
    summary = summarize_run(log.history, out, probe)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def evaluate_only(actor: PrecisionActor, task: Task, args: Args, log: RunLog, out: Path) -> dict:
    """``--steps 0``: evaluate the policy as loaded, log it as step 0, and stop."""
    metrics = {"step": 0, **evaluate(actor, task, args, 0)}
    log.log(metrics, total_steps=0, echo=False)
    log.close()
    print("\n".join(f"{k}: {v:.4f}" for k, v in metrics.items() if k.startswith("eval/")), flush=True)
    (out / "summary.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def _epoch_order(examples: list, step: int, per_step: int, seed: int) -> list:
    """The prompts of ``step``: consecutive slices of a per-epoch shuffle (resumable from the step alone)."""
    orders: dict[int, list[int]] = {}
    picked = []
    for i in range(step * per_step, (step + 1) * per_step):
        epoch, offset = divmod(i, len(examples))
        if epoch not in orders:
            orders[epoch] = list(range(len(examples)))
            random.Random(seed * 1_000_003 + epoch).shuffle(orders[epoch])
        picked.append(examples[orders[epoch][offset]])
    return picked


def probe_mismatch(learner, actor: PrecisionActor, examples: list, args: Args, device) -> dict:
    """The final policy's sampler–trainer mismatch in each ``--probe-dtypes`` dtype, on the same prompts."""
    from precision_oat.mismatch.lab import LabArgs, bf16_fp16_ratios, measure_dtype
    from precision_oat.models import Policy

    policy = Policy(learner.export_model(), actor.tokenizer, None)
    prompts = [actor.encode(e) for e in examples[:32]]
    lab = LabArgs(num_samples=4, max_new_tokens=args.rollout.max_new_tokens, temperature=args.rollout.temperature,
                  seed=args.train.seed, micro_batch_size=args.train.micro_batch_size, plots=False,
                  attn_implementation=args.model.attn_implementation)
    quiet = lambda *_: None  # noqa: E731
    results = {d: measure_dtype(lab, policy, prompts, d, device, quiet)[0] for d in args.log.probe_dtypes}
    return {"dtypes": results, "ratios": bf16_fp16_ratios(results)}


def summarize_run(history: list[dict], out: Path, probe: dict | None = None) -> dict:
    if not history:
        return {"output_dir": str(out)}
    window = max(1, len(history) // 10)
    first = sum(h["reward/mean"] for h in history[:window]) / window
    last = sum(h["reward/mean"] for h in history[-window:]) / window
    summary = {
        "output_dir": str(out),
        "steps": history[-1]["step"],
        "reward_first": first,
        "reward_last": last,
        **{k: sum(h[k] for h in history) / len(history) for k in SUMMARY_KEYS if k in history[0]},
        "skipped_steps": history[-1].get("train/skipped_steps", 0.0),
        "elapsed_s": history[-1]["time/elapsed_s"],
    }
    print(
        f"\ndone: {summary['steps']} steps in {summary['elapsed_s']:.0f}s · reward {first:.3f} → {last:.3f} "
        f"(mean of first/last {window} steps)\n"
        f"mismatch (mean over steps): |Δlogp| {summary.get('mismatch/abs_logp_diff_mean', float('nan')):.3e}  "
        f"seq log-ratio std {summary.get('mismatch/seq_logratio_std', float('nan')):.3e}  "
        f"k3 {summary.get('mismatch/k3', float('nan')):.3e} · skipped steps {summary['skipped_steps']:.0f}\n"
        f"outputs: {out}/metrics.jsonl, config.json, summary.json, checkpoints/",
        flush=True,
    )
    if probe:
        summary["probe"] = probe
        line = "  ".join(f"{d} {r['mismatch/abs_logp_diff_mean']:.2e}" for d, r in probe["dtypes"].items())
        print(f"final policy, |Δlogp| per dtype (same prompts, sampler vs trainer): {line}", flush=True)
        if probe["ratios"]:
            ratios = probe["ratios"]
            print(f"bf16/fp16: {ratios['abs_logp_diff_mean']:.1f}x token |Δlogp|, "
                  f"{ratios['seq_logratio_std']:.1f}x seq log-ratio std, {ratios['k3']:.0f}x k3 "
                  f"(mismatch_probe.json)", flush=True)
    return summary
