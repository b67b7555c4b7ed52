"""The local backend's step loop: one RL step after another, in a run the driver built.

    prompts → G samples (sampler dtype: built-in KV cache or vLLM) → rewards → advantages
            → learner update (trainer dtype: built-in fp32-master learner or DeepSpeed)
            → weights cast into the sampler, checked → metrics, evaluation, checkpoint

The actor and the update are the shared ones (:mod:`precision_oat.rl.actor`,
:mod:`precision_oat.rl.step`); what happens once per run is in
:mod:`~precision_oat.backends.local.driver`. This file holds the loop, its bookkeeping, and
the end of a run (the final mismatch probe and the summary).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from precision_oat.args import EvalArgs, LogArgs, RolloutArgs, TrainArgs
from precision_oat.distributed.world import World
from precision_oat.errors import UserError, out_of_memory_explained
from precision_oat.models import Policy
from precision_oat.precision.mismatch_metrics import mismatch_histograms
from precision_oat.precision.policy import Precision
from precision_oat.precision.weight_sync import push_weights
from precision_oat.rl.actor import PrecisionActor
from precision_oat.rl.step import RLStep
from precision_oat.runs.alarms import ALARM_EXIT_STATUS, AlarmWatch, alarm_line, parse_alarms
from precision_oat.runs.checkpoint import commit_checkpoint, export_policy, first_checkpoint, write_checkpoint
from precision_oat.runs.folder import STEP_PARTS, summarize_run, write_json
from precision_oat.runs.log import RunLog
from precision_oat.runs.mask_watch import MaskWatch
from precision_oat.runs.overflow_watch import OverflowWatch
from precision_oat.runs.profile import operator_profile, report_profile
from precision_oat.runs.signals import StopRequest
from precision_oat.runs.token_export import export_tokens, token_file
from precision_oat.samplers.sampler import Sampler
from precision_oat.seeds import PROMPT_ORDER, derive_seed


@dataclass
class Run:
    """What one run is made of: built once by the driver, stepped here."""

    out: Path
    world: World
    device: torch.device
    precision: Precision
    tokenizer: object
    # The task's training prompts.
    examples: list
    sampler: Sampler
    learner: RLStep
    actor: PrecisionActor
    # Rank 0's metrics log; None on the other ranks.
    log: Optional[RunLog]
    # Steps already done (a resume starts after them).
    start_step: int
    # The alarms inside an excursion at the checkpoint a resume starts from.
    alarms_inside: dict[str, bool]


def rank_times(world: World, metrics: dict) -> dict[str, float]:
    """With several processes, each rank's time split (``perf/time_rank<r>/<part>``) and the slowest rank's
    (``perf/time_slowest/<part>``): a data-parallel step lasts as long as its slowest rank's. ``perf/time/<part>``
    stays rank 0's own. Nothing with one process."""
    if world.size == 1:
        return {}
    ranks = world.gather({part: metrics[f"perf/time/{part}"] for part in STEP_PARTS})
    times = {f"perf/time_rank{rank}/{part}": t for rank, split in enumerate(ranks) for part, t in split.items()}
    times.update({f"perf/time_slowest/{part}": max(split[part] for split in ranks) for part in STEP_PARTS})
    return times


def run_steps(run: Run, train: TrainArgs, rollout: RolloutArgs, evaluation: EvalArgs, logging: LogArgs) -> dict:
    """Steps ``run.start_step`` … ``--steps``; return the summary (rank 0; an empty dict elsewhere)."""
    world, actor, learner, log = run.world, run.actor, run.learner, run.log
    say = world.say
    steps, per_step = train.steps, rollout.prompts_per_step
    if steps == 0:
        return evaluate_only(actor, evaluation, log, run.out)
    watch, masks = AlarmWatch(parse_alarms(logging.mismatch_alarm), run.alarms_inside), MaskWatch()
    overflows = OverflowWatch(static=run.precision.loss_scaling.mode == "static")
    say(first_checkpoint(run.start_step, steps, logging.save_every, logging.save_every_minutes), flush=True)
    # The signal handlers are the caller's again however the loop ends.
    with StopRequest(world.size) as stop:
        # A step's time runs from the previous record's moment to its own, so every second belongs to one
        # record; what follows the previous record (writing it: "log"; committing its checkpoint: "save")
        # happens in that time and counts in this step. The first step starts here.
        step_start, after_record = time.perf_counter(), {"log": 0.0, "save": 0.0}
        last_save = step_start
        for step in range(run.start_step, steps):
            batch, metrics = actor.rollout(prompts_of_step(run.examples, step, per_step, train.seed), step)
            # A co-located vLLM frees its GPU memory for the update; the weight sync wakes it.
            run.sampler.sleep()
            profiling = step + 1 == logging.profile_update
            with operator_profile(run.device) if profiling else contextlib.nullcontext() as profiled:
                update = learner.update(batch.to(run.device), step)
            if profiling:
                metrics["perf/profiled"] = 1.0  # the run's time split leaves this step out
                if world.is_main:
                    report_profile(run.out, step + 1, profiled)
            metrics.update(update.stats)
            sync_start = time.perf_counter()
            push_weights(run.sampler, learner.export_weights(), run.precision)
            metrics["perf/time/sync"] = time.perf_counter() - sync_start
            metrics["step"] = step + 1
            if evaluation.eval_every and ((step + 1) % evaluation.eval_every == 0 or step + 1 == steps):
                metrics.update(actor.evaluate(evaluation, step + 1))
            alarmed = watch.check(metrics)
            alarm_stop = world.any(bool(alarmed) and logging.mismatch_alarm_action == "stop")
            if not alarm_stop:
                for alarm in alarmed:
                    say(f"warning: {alarm_line(alarm, metrics, step + 1)} (once per excursion)", flush=True)
            for line in masks.check(metrics, step + 1) + overflows.check(metrics, step + 1):
                say(line, flush=True)
            # A signal may reach some ranks only: all of them stop at the same step.
            stopping = world.any(stop.requested is not None) or alarm_stop
            # The checkpoint is written before the record, which then holds the time it took, and committed after
            # it: a run killed in between resumes from the checkpoint before, whose rows it keeps, so
            # metrics.jsonl never misses a step. Every exchange between the ranks comes before the commit.
            save_start, checkpoint = time.perf_counter(), None
            # The ranks' clocks differ: they save when any of them finds the time up.
            minutes_up = bool(logging.save_every_minutes) and world.any(
                save_start - last_save >= 60 * logging.save_every_minutes)
            if ((logging.save_every and (step + 1) % logging.save_every == 0) or step + 1 == steps or stopping
                    or minutes_up):
                checkpoint = write_checkpoint(run.out, step + 1, learner, run.tokenizer, world, watch.inside)
                last_save = time.perf_counter()
            histograms_start = time.perf_counter()
            metrics["perf/time/save"] = after_record["save"] + histograms_start - save_start
            histograms = None
            if log is not None and log.wandb is not None:
                histograms = mismatch_histograms(batch.sampler_logprobs, update.old_logprobs.cpu(), batch.response_mask)
            if world.is_main and logging.export_tokens and (step + 1) % logging.export_tokens == 0:
                advantages = learner.compute_advantages(batch.rewards.view(-1, batch.group_size)).reshape(-1)
                export_tokens(token_file(run.out, step + 1), batch, update.old_logprobs, advantages)
            now = time.perf_counter()
            metrics["perf/time/log"] = after_record["log"] + now - histograms_start
            metrics["perf/time/other"] = now - step_start - sum(
                metrics[f"perf/time/{part}"] for part in STEP_PARTS if part != "other")
            metrics.update(rank_times(world, metrics))
            step_start = now
            if log is not None:
                log.log(metrics, histograms, total_steps=steps,
                        echo=(step + 1) % logging.log_every == 0 or step + 1 == steps, at=now)
            logged = time.perf_counter()
            if checkpoint is not None:
                commit_checkpoint(checkpoint, logging.keep_checkpoints, world)
            after_record = {"log": logged - now, "save": time.perf_counter() - logged}
            if stopping:
                if log is not None:
                    log.close()
                if alarm_stop:
                    if alarmed:
                        say(f"{alarm_line(alarmed[0], metrics, step + 1)}: stopped after saving a checkpoint at step "
                            f"{step + 1}; continue with the same command and --resume (it goes on through this "
                            "excursion and stops at the next one)", flush=True)
                    raise SystemExit(ALARM_EXIT_STATUS)
                say(f"{stop.requested or 'stop'}: saved a checkpoint at step {step + 1}; continue with --resume", flush=True)
                raise SystemExit(128 + (stop.signal_number or signal.SIGTERM))
    # Gathering the final weights is collective with several processes; rank 0 probes them.
    final = export_policy(learner, world) if logging.probe_dtypes else None
    # Rank 0 alone holds the metrics: its verdict is every rank's.
    unapplied = world.broadcast(no_step_applied(log.history[-1]) if world.is_main else None)
    if final is not None and world.is_main:
        # The probe samples and scores in each dtype on its own copies: the learner and the sampler leave the
        # device first.
        del learner, run.learner, run.sampler, actor.sampler
        if run.device.type == "cuda":
            torch.cuda.empty_cache()

    def finish() -> dict:
        log.close()
        probe = {}
        if final is not None:
            with out_of_memory_explained("the end-of-run mismatch probe", PROBE_MEMORY_FLAGS):
                probe = probe_mismatch(Policy(final, run.tokenizer, None),
                                       [actor.encode(e) for e in run.examples[:PROBE_PROMPTS]], train, rollout,
                                       logging.probe_dtypes, run.device)
            (run.out / "mismatch_probe.json").write_text(json.dumps(probe, indent=2))
        summary = summarize_run(log.history, run.out, probe)
        write_json(run.out / "summary.json", summary)  # atomic: its presence marks the run finished
        return summary

    # A probe that fails on rank 0 (out of memory) stops every rank with its line, as does a run with no step applied
    # once the summary is written.
    summary = world.on_main(finish) or {}
    if unapplied:
        raise UserError(unapplied)
    return summary


def no_step_applied(last: dict) -> Optional[str]:
    """The error line of a run whose every optimiser step overflowed and was skipped (``last``: its last metrics
    row), or None."""
    skipped = last.get("train/skipped_steps", 0.0)
    if skipped and not last.get("train/optimizer_steps", 1.0):
        return (f"every optimiser step of the run overflowed and was skipped ({skipped:.0f}), so the weights "
                f"never changed (loss scale now {last.get('train/loss_scale', 1.0):g}); lower "
                "--initial-loss-scale and --min-loss-scale, or find the inf/nan in the gradients "
                "(train/grad_norm in metrics.jsonl)")
    return None


def evaluate_only(actor: PrecisionActor, evaluation: EvalArgs, log: Optional[RunLog], out: Path) -> dict:
    """``--steps 0``: evaluate the policy as loaded, log it as step 0, and stop."""
    metrics = {"step": 0, **actor.evaluate(evaluation, 0)}
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


# The end-of-run probe: the first prompts of the task, this many samples each, responses of at most the run's
# --max-new-tokens and PROBE_MAX_NEW_TOKENS (the built-in decoder takes minutes for a 1.5B model's 8k tokens),
# and no more prompts than fit the token budget (always at least one).
PROBE_PROMPTS = 32
PROBE_SAMPLES = 4
PROBE_MAX_NEW_TOKENS = 1024
PROBE_TOKENS = 131072
# What to change when the probe runs out of GPU memory (the run's checkpoint is already written).
PROBE_MEMORY_FLAGS = "pass --probe-dtypes with no value to skip the probe, or lower --micro-batch-size"


def probe_mismatch(policy: Policy, prompt_ids: list[list[int]], train: TrainArgs, rollout: RolloutArgs,
                   dtypes, device) -> dict:
    """The final policy's mismatch in each of ``dtypes`` (``--probe-dtypes``), on the same prompts.

    Whatever the run's pair, the probe measures one pair in every dtype: the built-in KV-cache
    sampler against the HF model's forward, at top-p 1 and the run's temperature (a vLLM engine
    or a DeepSpeed engine per dtype would cost a start each); ``mismatch_probe.json`` says so.
    """
    from precision_oat.lab.lab import PairSettings, bf16_fp16_ratios, measure_pair

    max_new_tokens = min(rollout.max_new_tokens, PROBE_MAX_NEW_TOKENS)
    longest = max(len(ids) for ids in prompt_ids) + max_new_tokens
    prompt_ids = prompt_ids[: max(1, PROBE_TOKENS // (PROBE_SAMPLES * longest))]
    pair = PairSettings(sampler="builtin", trainer="hf", num_samples=PROBE_SAMPLES,
                        max_new_tokens=max_new_tokens, temperature=rollout.temperature, seed=train.seed,
                        micro_batch_size=train.micro_batch_size, logprob_chunk_size=train.logprob_chunk_size)
    quiet = lambda *_: None  # noqa: E731
    results = {d: measure_pair(pair, policy, prompt_ids, d, device, quiet)[0] for d in dtypes}
    measured = {"sampler": pair.sampler, "trainer": pair.trainer, "top_p": 1.0, "temperature": pair.temperature,
                "prompts": len(prompt_ids), "samples_per_prompt": pair.num_samples, "max_new_tokens": max_new_tokens}
    return {"measured": measured, "dtypes": results, "ratios": bf16_fp16_ratios(results)}
