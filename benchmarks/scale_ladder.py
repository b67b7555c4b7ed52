"""The scale ladder: full RL steps of the project's own loop at the paper's scale, model shape × response length.

    python benchmarks/scale_ladder.py                                  # every cell, vLLM + DeepSpeed fp16, ZeRO-1
    python benchmarks/scale_ladder.py --models qwen2.5-1.5b --response-lengths 8192 --time-limit-s 1200
    python benchmarks/scale_ladder.py --smoke                          # tiny, CPU, built-in sampler and learner

Each cell is one model shape (random weights from a config written below, no download) and one
response length; a random model never says stop, and no stop token is given, so every response
runs to the limit. A cell runs ``--steps`` RL steps of the library's own parts, as the local loop
does: the sampler generates ``--prompts-per-step`` × ``--num-samples`` responses to random prompts
(random 0/1 rewards) and, with ``--vllm-sleep``, releases its memory; the learner's ``update``
(π_old rescoring, then forward/backward and the optimiser step); then the checked weight sync,
which wakes vLLM. The first step also searches the largest
micro-batch that fits (``--micro-batch-sizes``, largest first; an out-of-memory moves to the
next); the later steps are timed. Each cell runs in its own process (vLLM engines live until
their process exits), under ``--cell-timeout-s`` and what is left of ``--time-limit-s``.

Recorded per cell (JSON under benchmarks/results/, printed as it goes):
    fits, micro_batch_size      whether the step ran, and the largest micro-batch that did; fits is
                                null for a cell the time limit skipped or stopped (its "error" says which)
    learner_peak_gb             torch.cuda.max_memory_allocated during the updates at that micro-batch
                                (the larger ones tried first are left out), less what the sampler
                                kept allocated when the learner was built
    learner_kept_gb             allocated after the update, while vLLM wakes (weights, gradients,
                                optimiser state), less sampler_asleep_allocated_gb (what torch counts
                                for vLLM while it sleeps); learner_cached_gb what the allocator still
                                holds beyond all that once emptied (free blocks in segments that a
                                live tensor pins), free_before_wake_gb the device's free memory then;
                                live_by_origin_gb (the live blocks summed by the Python frames that
                                allocated them, traced from the learner's start; "before the learner"
                                is the sampler's), largest_live_blocks_gb ([size, origin]) and
                                most_pinned_segments_gb ([free, size]) say what holds it; a cell whose
                                vLLM cannot wake records the error with these figures
    vllm_kv_cache_gb            vLLM's KV cache: one step's sequences (kv_cache_gb), or None where the
                                utilization sizes it (--no-kv-cache-for-the-step)
    sampler_reserved_gb         free device memory taken by building the sampler (vLLM's reservation;
                                with sleep mode the learner_peak_gb above is measured while it sleeps)
    sampler_tokens_per_s        response tokens sampled per second
    learner_tokens_per_s        sequence tokens (prompt + response) through rescoring and update per second
    mfu                         model FLOPs of rescoring and update / their time / --peak-tflops
    perf/time/*                 the loop's time split, median over the timed steps
    operators                   with --profile: one more update after the timed steps, under torch's
                                profiler; the operators that took the most device time (CPU time on
                                CPU), each [name, calls, ms, share of the update's device time];
                                profiled_wall_ms and profiled_device_ms that update's wall time and
                                its operators' device time (the rest the device spent idle), and
                                host_operators [name, calls, ms] where the host spent its own time
FLOPs of one step, per sequence of s tokens (r of them the response) on L layers of width h,
with N the body's parameters used in matrix products (every parameter but the input embedding
and the output projection) and V·h the output projection's: update 6·(N·s + V·h·r) + 12·L·h·s²
(forward + backward, full causal attention counted; the projection runs at response positions
only), rescoring 2·(N·s + V·h·r) + 4·L·h·s²; gradient checkpointing's recomputation is not
counted (model FLOPs, not hardware FLOPs).

The fp16/bf16 step-time ratio: ``--ratio-repeats`` cells of each dtype on ``--ratio-models`` at
``--ratio-length``, alternating fp16, bf16, fp16, …; the median step time of each dtype, divided.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import gc
import json
import math
import multiprocessing
import os
import statistics
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Literal, Optional

import torch
import tyro

from precision_oat.precision.policy import DType

# Shapes of the models the paper's scale calls for (random weights, built from these configs).
SHAPES = {
    "smollm2-135m": ("llama", dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                   intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True)),
    "qwen2.5-0.5b": ("qwen2", dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                   intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True)),
    # Untied, like DeepSeek-R1-Distill-Qwen-1.5B.
    "qwen2.5-1.5b": ("qwen2", dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                                   intermediate_size=8960, vocab_size=151936, tie_word_embeddings=False)),
    "qwen2.5-3b": ("qwen2", dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                                 intermediate_size=11008, vocab_size=151936, tie_word_embeddings=True)),
    # The smoke test's model.
    "tiny": ("qwen2", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                           intermediate_size=64, vocab_size=64, tie_word_embeddings=True)),
}
TIME_PARTS = ("sample", "score", "update", "sync", "other")
# Positions every shape is built with (Qwen2.5's own); a cell's prompt + response must fit.
MAX_POSITIONS = 32768


@dataclass
class LadderArgs:
    """Run the scale ladder: model shape × response length, full RL steps, memory and throughput."""

    # Model shapes (names of SHAPES in this script).
    models: tuple[str, ...] = ("smollm2-135m", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b")
    # Response lengths in tokens; every response runs to the limit.
    response_lengths: tuple[int, ...] = (1024, 4096, 8192)
    # Sampler and trainer dtype of the ladder's cells.
    dtype: DType = "fp16"
    # Prompts per RL step.
    prompts_per_step: int = 8
    # Samples per prompt.
    num_samples: int = 8
    # Tokens of each random prompt.
    prompt_len: int = 128
    # RL steps per cell; the first also searches the micro-batch, the others are timed (all are with one).
    steps: int = 2
    # Micro-batch sizes to try, largest first, until one fits.
    micro_batch_sizes: tuple[int, ...] = (64, 32, 16, 8, 4, 2, 1)
    # Sampler of the cells.
    sampler: Literal["vllm", "builtin"] = "vllm"
    # Learner of the cells.
    learner: Literal["deepspeed", "builtin"] = "deepspeed"
    # DeepSpeed ZeRO stage (of --learner deepspeed).
    zero_stage: int = 1
    # Recompute activations in the backward.
    gradient_checkpointing: bool = True
    # torch.compile each decoder layer of the learner's model and its log-softmax chunks (the run flag --compile-layers).
    compile_layers: bool = False
    # Fraction of the GPU vLLM may take for weights and KV cache.
    vllm_gpu_memory_utilization: float = 0.4
    # Size vLLM's KV cache to one step's sequences (see kv_cache_gb) instead of what the utilization leaves.
    kv_cache_for_the_step: bool = True
    # vLLM's sleep mode: its KV cache and weights are released during the update (CUDA).
    vllm_sleep: bool = True
    # vLLM without CUDA graphs: a faster start, a much slower decode (64 × 8k tokens: 113 s eager on an H200).
    vllm_enforce_eager: bool = False
    # Model shapes of the fp16/bf16 step-time ratio.
    ratio_models: tuple[str, ...] = ("qwen2.5-1.5b",)
    # Response length of the ratio's cells.
    ratio_length: int = 1024
    # Cells per dtype of the ratio, alternating fp16 and bf16; 0 skips the ratio.
    ratio_repeats: int = 3
    # Peak dense fp16/bf16 TFLOP/s of the device, for MFU (H200: 990).
    peak_tflops: float = 990.0
    # Wall-clock budget of the whole ladder in seconds; cells that would start later are skipped.
    time_limit_s: Optional[float] = None
    # Wall-clock limit of one cell in seconds.
    cell_timeout_s: float = 1200.0
    # "auto" picks CUDA when available.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # JSON file of the results; None writes benchmarks/results/scale_ladder.json (scale_ladder_smoke.json with --smoke).
    output: Optional[Path] = None
    # Folder of the saved random models vLLM loads; None uses the system's temporary folder.
    model_cache: Optional[Path] = None
    # Run the cells in this process instead of one process each (memory of one cell then leaks into the next).
    in_process: bool = False
    # A tiny model on CPU in fp32 with the built-in sampler and learner, one step, no ratio: checks the script, measures nothing.
    smoke: bool = False
    # After the timed steps, profile one more update: where its device time goes (the cell's "operators"), its wall
    # time, and where the host spends its own.
    profile: bool = False


def smoke_settings(args: LadderArgs) -> LadderArgs:
    return dataclasses.replace(
        args, models=("tiny",), response_lengths=(8,), dtype="fp32", prompts_per_step=2, num_samples=2, prompt_len=4,
        steps=1, micro_batch_sizes=(4, 2), sampler="builtin", learner="builtin", gradient_checkpointing=False,
        ratio_repeats=0, device="cpu", in_process=True,
        output=args.output or Path("benchmarks/results/scale_ladder_smoke.json"),
    )


# --- one cell ---


def build_config(name: str):
    """The transformers config of shape ``name``, with room for the longest prompt + response of any cell."""
    from transformers import LlamaConfig, Qwen2Config

    family, shape = SHAPES[name]
    config_class = {"llama": LlamaConfig, "qwen2": Qwen2Config}[family]
    return config_class(**shape, max_position_embeddings=MAX_POSITIONS, pad_token_id=0, eos_token_id=1)


def random_model(name: str):
    """Random fp32 weights of shape ``name`` (seed 0), on the CPU."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(build_config(name)).float().eval()


def matmul_params(model) -> int:
    """Parameters used in matrix products: all of them but an untied input embedding (a lookup)."""
    total = sum(p.numel() for p in model.parameters())
    if model.config.tie_word_embeddings:
        return total
    return total - model.get_input_embeddings().weight.numel()


def step_flops(model, num_sequences: int, seq_len: int, response_len: int) -> float:
    """Model FLOPs of rescoring (forward) and update (forward + backward) of ``num_sequences`` of ``seq_len`` tokens,
    ``response_len`` of them responses: the body runs at every position, the output projection at response
    positions only (the trainer scores those alone)."""
    c = model.config
    head = model.get_output_embeddings().weight.numel()
    body = matmul_params(model) - head
    attention = c.num_hidden_layers * c.hidden_size * seq_len**2
    return num_sequences * ((6 + 2) * (body * seq_len + head * response_len) + (12 + 4) * attention)


def kv_cache_gb(config, sequences: int, tokens: int, dtype: DType) -> float:
    """GiB of a KV cache in ``dtype`` that holds ``sequences`` of ``tokens`` at once, with 10% and 0.5 GiB to spare."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * (4 if dtype == "fp32" else 2)
    return gib(1.1 * sequences * tokens * per_token) + 0.5


def cell_args(args: LadderArgs, response_len: int, dtype: DType, micro_batch_size: int, config=None):
    """The run flags of one cell, as ``python -m precision_oat.main`` would take them."""
    from precision_oat.args import AlgorithmArgs, Args, ModelArgs, PrecisionArgs, RolloutArgs, TrainArgs

    kv_cache = None
    if args.kv_cache_for_the_step and config is not None:
        kv_cache = kv_cache_gb(config, args.prompts_per_step * args.num_samples, args.prompt_len + response_len, dtype)
    return Args(
        model=ModelArgs(gradient_checkpointing=args.gradient_checkpointing, compile_layers=args.compile_layers),
        precision=PrecisionArgs(dtype=dtype),
        algorithm=AlgorithmArgs(algo="pg"),
        rollout=RolloutArgs(sampler=args.sampler, prompts_per_step=args.prompts_per_step, num_samples=args.num_samples,
                            max_new_tokens=response_len, max_prompt_length=args.prompt_len,
                            vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization, vllm_sleep=args.vllm_sleep,
                            vllm_kv_cache_gb=kv_cache, vllm_enforce_eager=args.vllm_enforce_eager),
        # The builtin learner has no ZeRO stage, and refuses one other than the default.
        train=TrainArgs(learner=args.learner, micro_batch_size=micro_batch_size, learning_rate=1e-6, device=args.device,
                        zero_stage=args.zero_stage if args.learner == "deepspeed" else TrainArgs.zero_stage),
    )


def random_prompts(args: LadderArgs, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(2, vocab, (args.prompts_per_step, args.prompt_len), generator=g).tolist()


def run_cell(args: LadderArgs, name: str, response_len: int, dtype: DType) -> dict:
    """Build the sampler and the learner of one cell, run its steps, and return its figures."""
    from precision_oat.backends.local.driver import build_learner
    from precision_oat.errors import UserError
    from precision_oat.models import Policy, resolve_device
    from precision_oat.precision.weight_sync import push_weights
    from precision_oat.rl.rollout import collate
    from precision_oat.rl.settings import learner_settings
    from precision_oat.rl.step import finished
    from precision_oat.runs.profile import operator_profile
    from precision_oat.samplers import build_sampler
    from precision_oat.samplers.sampler import SamplingParams

    device = resolve_device(args.device)
    cuda = device.type == "cuda"
    longest = args.prompt_len + response_len
    model = random_model(name)
    flags = cell_args(args, response_len, dtype, args.micro_batch_sizes[0], model.config)
    precision = flags.precision.build()
    cell = {"model": name, "response_length": response_len, "dtype": dtype,
            "params": sum(p.numel() for p in model.parameters()), "device": torch.cuda.get_device_name(device) if cuda
            else "cpu", "fits": False, "micro_batch_size": None, "micro_batch_tried": {},
            "vllm_kv_cache_gb": flags.rollout.vllm_kv_cache_gb}

    folder = saved_model(args, name, model) if args.sampler == "vllm" else None
    free_before = device_free_bytes(device)
    sampler = build_sampler(Policy(model, SimpleNamespace(pad_token_id=0), folder), precision, device, flags.rollout,
                            seed=0, longest_response=response_len)
    cell["sampler_reserved_gb"] = gib(free_before - device_free_bytes(device)) if cuda else None
    allocated_before_learner = 0

    prompts = random_prompts(args, model.config.vocab_size)
    params = SamplingParams(n=args.num_samples, max_new_tokens=response_len, stop_token_ids=())
    rewards = torch.randint(0, 2, (args.prompts_per_step * args.num_samples,), generator=torch.Generator().manual_seed(1))
    learner, steps, peak = None, [], 0
    for step in range(args.steps):
        start = finished(device)
        completions = sampler.generate(prompts, dataclasses.replace(params, seed=step))
        sampled = finished(device)
        rollout = collate(completions, rewards.float().tolist(), args.num_samples, pad_token_id=0).to(device)
        sampler.sleep()
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        if learner is None:
            # What the sampler keeps allocated while the learner works. vLLM's sleeping memory pool still
            # counts here (its tensors stay, their memory is unmapped), so every learner figure subtracts it.
            allocated_before_learner = torch.cuda.memory_allocated(device) if cuda else 0
            cell["sampler_asleep_allocated_gb"] = gib(allocated_before_learner) if cuda else None
            if cuda:
                # Where each live block was allocated, from here on (allocator_picture reads it).
                torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python")
            learner, stats = largest_fitting_update(args, cell, model, response_len, dtype, rollout, device,
                                                    build_learner, learner_settings)
            if learner is None:
                return cell
        else:
            stats = learner.update(rollout, step).stats
        if cuda:
            peak = max(peak, torch.cuda.max_memory_allocated(device))
            cell["learner_peak_gb"] = gib(peak - allocated_before_learner)
            # What stays on the device while vLLM wakes: the learner's weights, gradients and optimiser state,
            # and whatever its allocator cannot give back (blocks that share a segment with a live tensor).
            free_device_memory(device)
            cell["learner_kept_gb"] = gib(torch.cuda.memory_allocated(device) - allocated_before_learner)
            cell["learner_cached_gb"] = gib(torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
            cell["free_before_wake_gb"] = gib(device_free_bytes(device))
            cell.update(allocator_picture(torch.cuda.memory_snapshot(include_traces=False)))
        synced = finished(device)
        try:
            push_weights(sampler, learner.export_weights(), precision)
        except UserError as e:  # vLLM cannot wake beside what the learner keeps
            cell["error"] = str(e)
            return cell
        done = finished(device)
        times = {"sample": sampled - start, "score": stats["perf/time/score"], "update": stats["perf/time/update"],
                 "sync": done - synced}
        times["other"] = done - start - sum(times.values())
        steps.append({"times": times, "tokens": float(rollout.attention_mask.sum()),
                      "response_tokens": float(rollout.response_mask.sum())})

    timed = steps[1:] or steps
    median = {part: statistics.median(s["times"][part] for s in timed) for part in TIME_PARTS}
    learner_time = median["score"] + median["update"]
    tokens = timed[0]["tokens"]
    cell.update({
        "fits": True,
        "learner_peak_allocated_gb": gib(peak) if cuda else None,
        "sampler_tokens_per_s": timed[0]["response_tokens"] / median["sample"],
        "learner_tokens_per_s": tokens / learner_time,
        "mfu": step_flops(model, len(completions), longest, response_len) / learner_time / (args.peak_tflops * 1e12),
        "step_time_s": statistics.median(sum(s["times"].values()) for s in timed),
        **{f"perf/time/{part}": value for part, value in median.items()},
    })
    if args.profile:
        sampler.sleep()  # the update's memory, as in the timed steps
        with operator_profile(device) as profiled:
            learner.update(rollout, args.steps)
        cell.update(profiled)
    return cell


def largest_fitting_update(args, cell, model, response_len, dtype, rollout, device, build_learner, learner_settings):
    """The first step's update with the largest micro-batch that fits; (learner, stats), or (None, None).

    One learner throughout: after an out-of-memory its partial gradients are dropped and the
    next size is tried (building a DeepSpeed engine again would cost time, and memory it may not give back).
    """
    from precision_oat.errors import UserError

    flags = cell_args(args, response_len, dtype, args.micro_batch_sizes[0])
    try:
        learner = build_learner(copy.deepcopy(model), learner_settings(flags, device))
    except UserError as e:
        if not isinstance(e.__cause__, torch.cuda.OutOfMemoryError):
            raise
        cell["error"] = str(e)
        return None, None
    for size in args.micro_batch_sizes:
        learner.settings = dataclasses.replace(learner.settings,
                                               train=dataclasses.replace(learner.settings.train, micro_batch_size=size))
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)  # the peak of the size that fits, not of those that did not
        try:
            stats = learner.update(rollout, 0).stats
        except UserError as e:
            if not isinstance(e.__cause__, torch.cuda.OutOfMemoryError):
                raise
            cell["micro_batch_tried"][size] = "out of memory"
            cell["error"] = str(e)
            stats = None
        if stats is None:
            # Out of the except block: the error's traceback, which holds the failed forward's
            # activations, is gone, so they can be collected and their memory given back.
            discard_gradients(learner)
            free_device_memory(device)
            continue
        cell["micro_batch_tried"][size] = "fits"
        cell["micro_batch_size"] = size
        cell.pop("error", None)
        return learner, stats
    return None, None


def discard_gradients(learner) -> None:
    """Drop what a failed update accumulated (in the model, in DeepSpeed's optimiser, in the built-in masters)."""
    learner.model.zero_grad(set_to_none=True)
    engine = getattr(learner, "engine", None)
    if engine is not None and engine.optimizer is not None:
        engine.optimizer.zero_grad(set_to_none=True)
    weights = getattr(learner, "weights", None)
    if weights is not None:
        weights.zero_grad()


def saved_model(args: LadderArgs, name: str, model) -> Path:
    """The random model saved once per shape as an HF folder (vLLM loads a folder), reused by later cells.

    Saved in bf16 to halve the disk (the 3B shape: 6 GB): the sampler's start-up weights only,
    since the first weight sync replaces every one of them with the learner's.
    """
    root = args.model_cache or Path(tempfile.gettempdir()) / "precision-oat-scale-ladder"
    folder = root / name
    if not (folder / "config.json").is_file():
        model.save_pretrained(folder, state_dict={k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    return folder


def allocator_picture(segments: list[dict], most: int = 12) -> dict:
    """From a CUDA allocator snapshot (``torch.cuda.memory_snapshot()``): the live bytes summed by where
    they were allocated, the largest live blocks, and the segments with the most free memory a live
    block keeps from the device (GiB)."""
    live = sorted((b for s in segments for b in s["blocks"] if b["state"] == "active_allocated"),
                  key=lambda b: b["size"], reverse=True)
    by_origin = collections.Counter()
    for block in live:
        by_origin[allocated_at(block)] += block["size"]
    pinned = sorted(((s["total_size"] - s["allocated_size"], s["total_size"]) for s in segments if s["allocated_size"]),
                    reverse=True)
    return {"live_by_origin_gb": {origin: round(gib(n), 3) for origin, n in by_origin.most_common(most)},
            "largest_live_blocks_gb": [[round(gib(b["size"]), 3), allocated_at(b)] for b in live[:most]],
            "most_pinned_segments_gb": [[round(gib(free), 3), round(gib(total), 3)] for free, total in pinned[:most]
                                        if free]}


def allocated_at(block: dict, depth: int = 3) -> str:
    """The innermost ``depth`` Python frames outside torch that allocated a block, innermost first; "before the
    learner" for a block allocated before the tracing began."""
    frames = [f for f in block.get("frames", ()) if f"{os.sep}torch{os.sep}" not in f["filename"]]
    if not frames:
        return "before the learner"
    return " < ".join(f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in frames[:depth])


def device_free_bytes(device: torch.device) -> int:
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 0


def free_device_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def gib(n: float) -> float:
    return n / 2**30


# --- the ladder ---


def cell_in_child(args: LadderArgs, name: str, response_len: int, dtype: DType, result_path: str) -> None:
    """A child process's cell: its figures, or its error, as JSON at ``result_path``."""
    try:
        cell = run_cell(args, name, response_len, dtype)
    except Exception as e:  # a failed cell is a result of the ladder, not the end of it
        cell = {"model": name, "response_length": response_len, "dtype": dtype, "fits": False,
                "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    Path(result_path).write_text(json.dumps(cell))


def run_isolated(args: LadderArgs, name: str, response_len: int, dtype: DType, timeout_s: float) -> dict:
    """One cell in a fresh process (spawned: CUDA and vLLM start clean), killed after ``timeout_s``.

    The parent never touches CUDA, so each cell has the whole device.
    """
    if args.in_process:
        return run_cell(args, name, response_len, dtype)
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "cell.json"
        child = multiprocessing.get_context("spawn").Process(target=cell_in_child,
                                                             args=(args, name, response_len, dtype, str(result)))
        child.start()
        child.join(timeout_s)
        if child.is_alive():
            child.kill()
            child.join()
            # Stopped, not refused by memory: whether the cell fits is not known.
            limit = "--cell-timeout-s" if timeout_s >= args.cell_timeout_s else "the ladder's --time-limit-s"
            return {"model": name, "response_length": response_len, "dtype": dtype, "fits": None,
                    "error": f"stopped by {limit} after {timeout_s:.0f} s"}
        if not result.is_file():
            return {"model": name, "response_length": response_len, "dtype": dtype, "fits": False,
                    "error": f"the cell's process died (exit code {child.exitcode})"}
        return json.loads(result.read_text())


def main(args: LadderArgs) -> dict:
    if args.smoke:
        args = smoke_settings(args)
    output = args.output or Path("benchmarks/results/scale_ladder.json")
    start = time.monotonic()
    result = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
              "torch": torch.__version__, "cells": [], "ratio_cells": []}

    def remaining() -> float:
        return math.inf if args.time_limit_s is None else args.time_limit_s - (time.monotonic() - start)

    def run(name: str, length: int, dtype: DType, into: str) -> None:
        if remaining() <= 0:
            cell = {"model": name, "response_length": length, "dtype": dtype, "fits": None, "error": "skipped: time limit"}
        else:
            cell = run_isolated(args, name, length, dtype, min(args.cell_timeout_s, remaining()))
        result[into].append(cell)
        print(describe(cell), flush=True)
        write(output, result)

    for name in args.models:
        for length in args.response_lengths:
            run(name, length, args.dtype, "cells")
    for _ in range(args.ratio_repeats):
        for name in args.ratio_models:
            for dtype in ("fp16", "bf16"):
                run(name, args.ratio_length, dtype, "ratio_cells")
    # The step's time, and the learner's alone (a cell's sampling varies more between runs than the dtypes differ).
    for part, seconds in (("step", step_seconds), ("learner", learner_seconds)):
        result[f"fp16_over_bf16_{part}_time"] = time_ratios(result["ratio_cells"], seconds)
        for name, ratio in result[f"fp16_over_bf16_{part}_time"].items():
            print(f"{name} @ {args.ratio_length}: fp16/bf16 {part} time {ratio:.3f}x", flush=True)
    write(output, result)
    return result


def step_seconds(cell: dict) -> float:
    return cell["step_time_s"]


def learner_seconds(cell: dict) -> float:
    """Rescoring and update, the learner's part of a step."""
    return cell["perf/time/score"] + cell["perf/time/update"]


def time_ratios(cells: list[dict], seconds: Callable[[dict], float]) -> dict[str, float]:
    """Per model, the median of ``seconds`` over its fp16 cells that ran / the median over its bf16 ones."""
    ratios = {}
    for name in dict.fromkeys(c["model"] for c in cells):
        medians = {}
        for dtype in ("fp16", "bf16"):
            times = [seconds(c) for c in cells if c["model"] == name and c["dtype"] == dtype and c.get("fits")]
            medians[dtype] = statistics.median(times) if times else None
        if medians["fp16"] and medians["bf16"]:
            ratios[name] = medians["fp16"] / medians["bf16"]
    return ratios


def describe(cell: dict) -> str:
    head = f"{cell['model']} × {cell['response_length']} {cell['dtype']}:"
    if cell.get("fits") is None:
        return f"{head} not measured ({cell['error']})"
    if not cell["fits"]:
        return f"{head} does not run ({cell.get('error', 'no micro-batch fits')})"
    memory = "" if cell.get("learner_peak_gb") is None else (
        f", learner peak {cell['learner_peak_gb']:.1f} GiB, sampler {cell['sampler_reserved_gb']:.1f} GiB")
    split = " ".join(f"{p} {cell[f'perf/time/{p}']:.2f}" for p in TIME_PARTS)
    return (f"{head} micro-batch {cell['micro_batch_size']}{memory}, sampler {cell['sampler_tokens_per_s']:,.0f} tok/s, "
            f"learner {cell['learner_tokens_per_s']:,.0f} tok/s, MFU {cell['mfu']:.1%}, step {cell['step_time_s']:.2f} s "
            f"({split})")


def write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(tyro.cli(LadderArgs))
