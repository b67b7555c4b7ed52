"""The embedded RL loop, top to bottom: one process, CPU or one GPU.

    prompts → G samples (sampler dtype: built-in KV cache or vLLM) → rewards → advantages
            → learner update (trainer dtype: built-in fp32-master learner or DeepSpeed)
            → weights cast into the sampler

The actor and the update are the shared ones (:mod:`precision_oat.rl.actor`,
:mod:`precision_oat.rl.step`); this file holds the loop, its bookkeeping and the
end-of-run probe.
"""

from __future__ import annotations

import json
import random
import signal
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import torch

from precision_oat import stacks
from precision_oat.rl.actor import PrecisionActor, check_prompt_lengths, encode_prompt
from precision_oat.algorithms import AlgorithmSpec, compose
from precision_oat.args import Args, algorithm_spec
from precision_oat.errors import LEARNER_MEMORY_FLAGS, out_of_memory_explained
from precision_oat.distributed.world import SINGLE, World, check_layout, check_same_config, world_from_env
from precision_oat.runs.checkpoint import checkpoint_step, require_checkpoint, resume_checkpoint, save_checkpoint
from precision_oat.learners.builtin import PrecisionLearner
from precision_oat.precision.mismatch_metrics import mismatch_histograms
from precision_oat.mismatch.preflight import before_fp16_run
from precision_oat.models import Policy, load_policy, resolve_device
from precision_oat.precision.policy import Precision
from precision_oat.presets import to_values
from precision_oat.runs.resume import check_resume, record_resume
from precision_oat.rl.step import UpdateSettings
from precision_oat.runs.folder import (STEP_PARTS, config_values, output_dir_for, start_new_run, summarize_run,
                                       write_json)
from precision_oat.runs.lock import RunLock
from precision_oat.runs.log import RunLog
from precision_oat.runs.signals import StopRequest
from precision_oat.samplers import build_sampler
from precision_oat.rl.seeds import PROMPT_ORDER, derive_seed
from precision_oat.tasks import build_task
from precision_oat.precision.weight_sync import push_weights


def build_learner(args: Args, model, precision, spec, device, world: World = SINGLE):
    """``--learner``: the built-in learner or DeepSpeed's, with the algorithm's mixins before it."""
    t, r = args.train, args.rollout
    settings = UpdateSettings(micro_batch_size=t.micro_batch_size, train_batch_size=t.train_batch_size,
                              num_epochs=t.num_epochs, seed=t.seed, temperature=r.temperature,
                              self_consistent_old_logprobs=t.self_consistent_old_logprobs, world=world,
                              logprob_chunk_size=t.logprob_chunk_size, micro_batch_tokens=t.micro_batch_tokens)
    base = PrecisionLearner
    if t.learner == "deepspeed":
        from precision_oat.learners.deepspeed_learner import DeepSpeedLearner

        base = DeepSpeedLearner
    with out_of_memory_explained(f"the {t.learner} learner's start (weights, masters, optimiser state)",
                                 LEARNER_MEMORY_FLAGS):
        return compose(spec, base)(model, precision, spec, settings, t, args.lora, device,
                                   args.model.gradient_checkpointing)


def train(args: Args) -> dict:
    """Run the loop; return the summary (also printed and written to OUTPUT_DIR/summary.json)."""
    # Everything that can be wrong with the arguments fails here, before any model loads.
    precision = args.precision.build()
    spec = algorithm_spec(args)
    if args.rollout.sampler == "vllm":
        stacks.require("vllm")
    if args.train.learner == "deepspeed":
        stacks.require("deepspeed")
    world, device = processes(args)
    out = world.broadcast(output_dir_for(args))
    check_same_config(world, config_values(out, args))
    newest = require_checkpoint(out) if args.log.resume else None
    # One run at a time in a folder (rank 0 holds the lock); a new run never writes over an old one.
    with RunLock(out) if world.is_main else nullcontext():
        finished = None
        if world.is_main:
            if newest is not None:
                finished = check_resume(out, args, checkpoint_step(newest))
            else:
                start_new_run(out, args)
        finished = world.broadcast(finished)
        if finished is not None:
            return finished
        return train_in(out, args, precision, spec, device, world)


def train_in(out: Path, args: Args, precision: Precision, spec: AlgorithmSpec, device: torch.device,
             world: World) -> dict:
    """The run in its claimed folder ``out``: config.json is written, and a resume has been checked."""
    say = print if world.is_main else (lambda *a, **k: None)
    say(f"precision-oat · backend local · algo {args.algorithm.algo} ({spec.advantage} / {spec.objective} / "
        f"{spec.correction} / {spec.reduction}) · sampler {args.rollout.sampler} · learner {args.train.learner} · "
        f"device {device}" + (f" · {world.size} processes" if world.size > 1 else "") +
        f"\nprecision policy:\n{precision.describe()}\nprecision contract: {precision.describe_contract()}", flush=True)

    torch.manual_seed(args.train.seed)
    random.seed(args.train.seed)
    policy = load_policy(args.model)
    task = build_task(args.task, args.eval, policy.tokenizer)
    check_layout(world, args.train.learner, args.rollout.prompts_per_step, args.rollout.num_samples,
                 args.train.train_batch_size, task.eval_sets() if args.eval.eval_every or args.train.steps == 0 else {})
    examples = task.train_set()
    if not args.log.resume and world.is_main:
        first = prompts_of_step(examples, 0, args.rollout.prompts_per_step, args.train.seed)
        before_fp16_run(policy.model, [encode_prompt(task, policy.tokenizer, e) for e in first], precision,
                        args.precision, out, device, log=lambda line: say(line, flush=True))
    # The sampler copies the fp32 weights first; the learner then takes the model over (it
    # casts it in place and may wrap it with LoRA).
    sampler = build_sampler(policy, precision, device, args.rollout, args.train.seed,
                            folder=out / "vllm_init" / (f"rank{world.rank}" if world.size > 1 else ""),
                            longest_response=max(args.rollout.max_new_tokens, args.eval.eval_max_new_tokens or 0))
    learner = build_learner(args, policy.model, precision, spec, device, world)
    actor = PrecisionActor(sampler, task, policy.tokenizer, args.rollout, args.train.seed, world)
    check_prompt_lengths([len(actor.encode(e)) for e in examples], args.rollout.max_prompt_length)

    start_step = 0
    if args.log.resume:
        folder, start_step = resume_checkpoint(out, learner)
        push_weights(sampler, learner.export_weights(), precision)
        if world.is_main:
            record_resume(out, args, start_step)
        say(f"resumed from {folder} at step {start_step}", flush=True)

    # Rank 0 writes the run's metrics; the other ranks only compute.
    log = RunLog(out, to_values(args), wandb_mode=args.log.wandb_mode, project=args.log.wandb_project,
                 run_name=args.log.run_name or out.name,
                 resume_step=start_step if args.log.resume else None) if world.is_main else None
    steps, per_step = args.train.steps, args.rollout.prompts_per_step
    if steps == 0:
        return evaluate_only(actor, args, log, out)
    stop = StopRequest()
    for step in range(start_step, steps):
        step_start = time.perf_counter()
        rollout, metrics = actor.rollout(prompts_of_step(examples, step, per_step, args.train.seed), step)
        release_sampler_memory(sampler)
        metrics.update(learner.update(rollout.to(device), step))
        sync_start = time.perf_counter()
        push_weights(sampler, learner.export_weights(), precision)
        metrics["perf/time/sync"] = time.perf_counter() - sync_start
        metrics["step"] = step + 1
        if args.eval.eval_every and ((step + 1) % args.eval.eval_every == 0 or step + 1 == steps):
            metrics.update(actor.evaluate(args.eval, step + 1))
        metrics["perf/time/other"] = time.perf_counter() - step_start - sum(
            metrics[f"perf/time/{part}"] for part in STEP_PARTS if part != "other")
        if log is not None:
            histograms = None
            if log.wandb is not None:
                histograms = mismatch_histograms(rollout.sampler_logprobs, learner.old_logprobs.cpu(),
                                                 rollout.response_mask)
            log.log(metrics, histograms, total_steps=steps,
                    echo=(step + 1) % args.log.log_every == 0 or step + 1 == steps)
        # A signal may reach some ranks only: all of them stop at the same step.
        stopping = world.any(stop.requested is not None)
        if (args.log.save_every and (step + 1) % args.log.save_every == 0) or step + 1 == steps or stopping:
            save_checkpoint(out, step + 1, learner, policy.tokenizer, args.log.keep_checkpoints, world)
        if stopping:
            if log is not None:
                log.close()
            say(f"{stop.requested or 'stop'}: saved a checkpoint at step {step + 1}; continue with --resume", flush=True)
            raise SystemExit(128 + (stop.signal_number or signal.SIGTERM))
    stop.restore()
    # Gathering the final weights is collective with several processes; rank 0 probes them.
    final = Policy(learner.export_model(), policy.tokenizer, None) if args.log.probe_dtypes else None
    if not world.is_main:
        return {}
    log.close()
    probe = {}
    if final is not None:
        # The probe samples and scores in each dtype on its own copies: the learner and the
        # sampler leave the device first.
        del learner, sampler, actor.sampler
        if device.type == "cuda":
            torch.cuda.empty_cache()
        probe = probe_mismatch(final, [actor.encode(e) for e in examples[:32]], args, device)
        (out / "mismatch_probe.json").write_text(json.dumps(probe, indent=2))
    summary = summarize_run(log.history, out, probe)
    write_json(out / "summary.json", summary)  # atomic: its presence marks the run finished
    return summary


def release_sampler_memory(sampler) -> None:
    """Let a sampler that can (vLLM in sleep mode) free its GPU memory for the update; the weight sync wakes it."""
    sleep = getattr(sampler, "sleep", None)
    if sleep is not None:
        sleep()


def processes(args: Args) -> tuple[World, "torch.device"]:
    """This process's place among the launcher's processes (one without a launcher), and its device."""
    world = world_from_env()
    device = resolve_device(args.train.device)
    if world.size > 1:
        from precision_oat.learners.deepspeed_config import ensure_process_group

        if device.type == "cuda":
            device = torch.device("cuda", world.local_rank)
            torch.cuda.set_device(device)
        ensure_process_group(device)
    return world, device


def evaluate_only(actor: PrecisionActor, args: Args, log: Optional[RunLog], out: Path) -> dict:
    """``--steps 0``: evaluate the policy as loaded, log it as step 0, and stop."""
    metrics = {"step": 0, **actor.evaluate(args.eval, 0)}
    if log is None:
        return metrics
    log.log(metrics, total_steps=0, echo=False)
    log.close()
    print("\n".join(f"{k}: {v:.4f}" for k, v in metrics.items() if k.startswith("eval/")), flush=True)
    write_json(out / "summary.json", metrics)
    return metrics


def prompts_of_step(examples: list, step: int, per_step: int, seed: int) -> list:
    """The prompts of ``step``: consecutive slices of a per-epoch shuffle (resumable from the step alone)."""
    orders: dict[int, list[int]] = {}
    picked = []
    for i in range(step * per_step, (step + 1) * per_step):
        epoch, offset = divmod(i, len(examples))
        if epoch not in orders:
            orders[epoch] = list(range(len(examples)))
            random.Random(derive_seed(seed, PROMPT_ORDER, epoch)).shuffle(orders[epoch])
        picked.append(examples[orders[epoch][offset]])
    return picked


def probe_mismatch(policy: Policy, prompt_ids: list[list[int]], args: Args, device) -> dict:
    """The final policy's sampler–trainer mismatch in each ``--probe-dtypes`` dtype, on the same prompts."""
    from precision_oat.mismatch.lab import PairSettings, bf16_fp16_ratios, measure_pair

    pair = PairSettings(num_samples=4, max_new_tokens=args.rollout.max_new_tokens,
                        temperature=args.rollout.temperature, seed=args.train.seed,
                        micro_batch_size=args.train.micro_batch_size)
    quiet = lambda *_: None  # noqa: E731
    results = {d: measure_pair(pair, policy, prompt_ids, d, device, quiet)[0] for d in args.log.probe_dtypes}
    return {"dtypes": results, "ratios": bf16_fp16_ratios(results)}
