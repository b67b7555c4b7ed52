"""precision-oat against TRL on one GPU: the same GRPO run through each, timed, its memory and mismatch measured.

    python benchmarks/peer_trl.py --model <SmolLM2 HF folder> --dtypes bf16 fp16 --steps 15 --output <folder>
    python benchmarks/peer_trl.py --output <folder> --report-only     # the figures and the table again, from its files

For each dtype TRL's GRPOTrainer runs first (vLLM in colocate mode, the setting TRL documents for one
GPU), then precision-oat's own command (``python -m precision_oat.main --algo grpo --sampler vllm
--learner deepspeed``), each in a process of its own with the GPU to itself, with the same:
  - model: the folder saved again with its weights in the dtype under test (``checkpoints/``), given to
    both. TRL's colocated vLLM takes no dtype and runs in the checkpoint's; both trainers hold fp32
    weights and compute in the dtype (TRL: autocast, with a gradient scaler in fp16);
  - prompts in the same order: the counting task's, step by step as precision-oat's loop draws them;
  - reward: precision-oat's counting grader (a response cut at the limit scores 0);
  - settings: prompts per step, samples per prompt (G), maximum new tokens, learning rate (constant),
    temperature, micro-batch, steps, gradient clipping at 1, vLLM's share of the GPU, CUDA graphs;
  - algorithm: Dr.GRPO (advantage r − mean, PPO clip 0.2/0.2, token losses summed and divided by the
    maximum length, no KL term). One departure: TRL multiplies the loss by its default
    importance-sampling correction (π_old/μ per sequence, masked above 3), the computation that also
    gives its mismatch figure; ``--algo grpo`` applies none.

Recorded per framework, the first ``--warmup-steps`` steps left out of every time:
    step_s          median wall time of an optimiser step (TRL: between the trainer's step ends;
                    precision-oat: its perf/time/* parts summed, less the last step's checkpoint save)
    parts_s         median per part: sample (vLLM's generate), score (π_old, and the rewards), update
                    (forward/backward and the optimiser step), sync (weights into vLLM), other
    tokens_per_s    generated tokens / the timed steps' wall time
    gpu_peak_gib    nvidia-smi's memory in use at its peak (polled every 0.5 s), less what was in use before
    torch_peak_gib  torch.cuda.max_memory_allocated in TRL's process (its vLLM allocates through torch)
    own             each framework's own mismatch figures: TRL's sampling/sampling_logp_difference and
                    sampling/importance_sampling_ratio, precision-oat's mismatch/abs_logp_diff_mean
    lab             precision_oat.precision.mismatch_metrics on each step's rollout, μ against π_old: TRL's
                    captured from the trainer (GRPOTrainer keeps no log-probs), precision-oat's as logged
Prints one table and writes ``peer_trl.json`` into ``--output``, beside each run's log and files.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Optional, Sequence

import tyro

Dtype = Literal["bf16", "fp16"]
Framework = Literal["trl", "precision-oat"]
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
PARTS = ("sample", "score", "update", "sync", "other")
# precision-oat's perf/time/* parts under the names above: the reward's grading counts as scoring, as in TRL, and
# writing the metrics as other; perf/time/save (the checkpoint at the last step) is left out, since TRL saves none.
OURS_PARTS = {"sample": ("sample",), "score": ("score", "reward"), "update": ("update",), "sync": ("sync",),
              "other": ("other", "log")}
COLUMNS = ("dtype", "framework", "steps timed", "step s", "sample / score / update / sync / other s",
           "mean response tokens", "generated tok/s", "GPU peak GiB (nvidia-smi)", "own mismatch",
           "lab token \\|Δlogp\\|", "lab k3", "reward first / last")
LAB_KEYS = ("abs_logp_diff_mean", "k3", "seq_kl", "seq_logratio_std")
TRL_OWN_KEYS = ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
                "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
                "sampling/importance_sampling_ratio/max")
OURS_OWN_KEYS = ("mismatch/abs_logp_diff_mean", "mismatch/abs_logp_diff_max")


@dataclass
class PeerArgs:
    """Run TRL's GRPOTrainer and precision-oat's GRPO on one GPU with the same model, prompts and settings."""

    # The HF folder of the model (fp32 weights); each dtype's run gets a copy saved in that dtype.
    model: Optional[Path] = None
    # Dtypes to compare, one TRL run and one precision-oat run each.
    dtypes: tuple[Dtype, ...] = ("bf16",)
    # Frameworks to run, in this order.
    frameworks: tuple[Framework, ...] = ("trl", "precision-oat")
    # Optimiser steps per run (one rollout each).
    steps: int = 15
    # First steps left out of the times (engine warm-up, allocator growth).
    warmup_steps: int = 3
    # Prompts per step.
    prompts_per_step: int = 8
    # Samples per prompt (G).
    num_samples: int = 4
    # Longest response in tokens.
    max_new_tokens: int = 768
    # Learning rate, constant.
    learning_rate: float = 2e-5
    # Sampling temperature.
    temperature: float = 1.0
    # Sequences per forward/backward; the step's responses make prompts × samples / this many micro-batches.
    micro_batch_size: int = 8
    # Share of the GPU vLLM reserves for its weights and KV cache, in both frameworks.
    vllm_gpu_memory_utilization: float = 0.3
    # Seed of both runs.
    seed: int = 0
    # Wall-clock limit of one framework's run in seconds.
    run_timeout_s: float = 480.0
    # Folder of the results: peer_trl.json, each run's folder and log, the dtype checkpoints.
    output: Path = Path("benchmarks/results/peer_trl")
    # Run TRL alone, in this process, on this checkpoint (in --dtypes' first dtype); the comparison sets it for its child.
    trl_checkpoint: Optional[Path] = None
    # Run nothing: rebuild peer_trl.json's figures and the table from the runs already in --output.
    report_only: bool = False

    def check(self) -> None:
        """Refuse settings the two frameworks cannot share (one line naming the flag)."""
        from precision_oat.errors import UserError

        if self.model is None and not self.report_only:
            raise UserError("--model: give the HF folder of the model both frameworks train")
        rows = self.prompts_per_step * self.num_samples
        if self.micro_batch_size < 1 or rows % self.micro_batch_size:
            raise UserError(f"--micro-batch-size {self.micro_batch_size}: it must divide the step's {rows} responses "
                            f"(--prompts-per-step × --num-samples) so both frameworks run the same micro-batches")
        if self.num_samples < 2:
            raise UserError(f"--num-samples {self.num_samples}: GRPO needs at least 2 samples per prompt")
        if not 0 <= self.warmup_steps < self.steps:
            raise UserError(f"--warmup-steps {self.warmup_steps}: leave at least one of the {self.steps} steps timed")


# --- the same run, said to each framework ---


def ours_command(args: PeerArgs, checkpoint: Path, dtype: Dtype, out: Path) -> list[str]:
    """precision-oat's command line for the run (the command a user types)."""
    return [sys.executable, "-m", "precision_oat.main", "--model", str(checkpoint), "--task", "counting",
            "--algo", "grpo", "--sampler", "vllm", "--learner", "deepspeed", "--zero-stage", "1", "--device", "cuda",
            "--dtype", dtype, "--seed", str(args.seed), "--steps", str(args.steps),
            "--prompts-per-step", str(args.prompts_per_step), "--num-samples", str(args.num_samples),
            "--max-new-tokens", str(args.max_new_tokens), "--temperature", str(args.temperature),
            "--learning-rate", str(args.learning_rate), "--micro-batch-size", str(args.micro_batch_size),
            "--vllm-gpu-memory-utilization", str(args.vllm_gpu_memory_utilization), "--no-vllm-enforce-eager",
            "--save-every", "1000", "--log-every", "1", "--wandb-mode", "disabled", "--output-dir", str(out)]


def trl_config(args: PeerArgs, dtype: Dtype, out: Path) -> dict:
    """Keyword arguments of TRL's ``GRPOConfig`` for the run. TRL counts batches in responses, not prompts."""
    rows = args.prompts_per_step * args.num_samples
    return dict(
        output_dir=str(out), max_steps=args.steps, seed=args.seed,
        per_device_train_batch_size=args.micro_batch_size, gradient_accumulation_steps=rows // args.micro_batch_size,
        num_generations=args.num_samples, max_completion_length=args.max_new_tokens, temperature=args.temperature,
        top_p=1.0, learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, loss_type="dr_grpo", scale_rewards="none", beta=0.0, epsilon=0.2, num_iterations=1,
        bf16=dtype == "bf16", fp16=dtype == "fp16", model_init_kwargs={"dtype": "float32"},
        gradient_checkpointing=False, use_vllm=True, vllm_mode="colocate",
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        # The prompts in the order precision-oat's loop draws them (trl_prompt_rows).
        shuffle_dataset=False, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
    )


def trl_prompt_rows(args: PeerArgs) -> list[dict]:
    """The dataset TRL reads in order: each step's prompts, as precision-oat's loop picks and renders them."""
    from precision_oat.backends.local.loop import prompts_of_step
    from precision_oat.tasks.counting import CountingTask

    task = CountingTask()
    return [{"prompt": task.render(e), "question": e.question, "reference": e.reference}
            for step in range(args.steps) for e in prompts_of_step(task.train_set(), step, args.prompts_per_step,
                                                                     args.seed)]


def is_truncated(completion_ids: Sequence[int], max_new_tokens: int, eos_ids: set[int]) -> bool:
    """A response cut at the limit: as long as the limit and not ended by an end-of-sequence token."""
    return len(completion_ids) >= max_new_tokens and (not completion_ids or completion_ids[-1] not in eos_ids)


def counting_reward(max_new_tokens: int, eos_ids: set[int]):
    """A TRL reward function that grades with precision-oat's counting task."""
    from precision_oat.tasks.counting import CountingTask
    from precision_oat.tasks.task import Example

    task = CountingTask()

    def counting(completions, completion_ids, question, reference, **_):
        examples = [Example(q, r) for q, r in zip(question, reference)]
        cut = [is_truncated(ids, max_new_tokens, eos_ids) for ids in completion_ids]
        return task.rewards(completions, examples, cut)

    return counting


# --- TRL, in its own process ---


def run_trl(args: PeerArgs) -> None:
    """TRL's GRPOTrainer on ``--trl-checkpoint``; writes ``trl.json`` (one record per step) into ``--output``."""
    import torch
    import transformers
    import trl
    import vllm
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from precision_oat.precision.mismatch_metrics import mismatch_metrics

    dtype = args.dtypes[0]
    clock = {"sample": 0.0, "sync": 0.0, "generate_and_score": 0.0, "training_step": 0.0, "optimizer": 0.0}
    rollouts: list[dict] = []

    class RecordedGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that keeps each rollout's mismatch (μ against π_old) and times the step's parts."""

        def _generate_and_score_completions(self, inputs):
            start = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            clock["generate_and_score"] += time.perf_counter() - start
            mask = out["completion_mask"].bool()
            mu, pi_old = out["sampling_per_token_logps"], out["old_per_token_logps"]
            scored = mask & mu.isfinite()  # a token vLLM could not score has no μ
            rollouts.append({"tokens": int(mask.sum()),
                             **mismatch_metrics(mu.nan_to_num(0.0), pi_old, scored)})
            return out

        def training_step(self, *a, **k):
            start = time.perf_counter()
            loss = super().training_step(*a, **k)
            clock["training_step"] += time.perf_counter() - start
            return loss

    def timed(part, method):
        def call(*a, **k):
            start = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                clock[part] += time.perf_counter() - start
        return call

    steps: list[dict] = []

    class StepRecorder(TrainerCallback):
        """Each optimiser step's wall time, its parts and TRL's logged figures."""

        def on_train_begin(self, *_, **__):
            self.last = time.perf_counter()

        def on_pre_optimizer_step(self, *_, **__):
            self.optimizer_start = time.perf_counter()

        def on_optimizer_step(self, *_, **__):
            clock["optimizer"] += time.perf_counter() - self.optimizer_start

        def on_step_end(self, *_, **__):
            now = time.perf_counter()
            wall, self.last = now - self.last, now
            generated = clock["sample"] + clock["sync"]
            parts = {"sample": clock["sample"], "sync": clock["sync"],
                     "score": clock["generate_and_score"] - generated,
                     "update": clock["training_step"] - clock["generate_and_score"] + clock["optimizer"]}
            parts["other"] = wall - sum(parts.values())
            rollout = rollouts[-1]
            steps.append({"step_s": wall, "parts": parts, "tokens": rollout["tokens"],
                          "lab": {k: rollout[f"mismatch/{k}"] for k in LAB_KEYS}, "own": {}})
            for key in clock:
                clock[key] = 0.0

        def on_log(self, _args, _state, _control, logs=None, **__):
            if steps and logs and "reward" in logs:
                steps[-1]["reward"] = logs["reward"]
                steps[-1]["own"] = {k: logs[k] for k in TRL_OWN_KEYS if k in logs}
                steps[-1]["trl_step_time"] = logs.get("step_time")

    out = args.output
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.trl_checkpoint)
    eos = {tokenizer.eos_token_id} - {None}
    trainer = RecordedGRPOTrainer(
        model=str(args.trl_checkpoint), processing_class=tokenizer,
        reward_funcs=counting_reward(args.max_new_tokens, eos), train_dataset=Dataset.from_list(trl_prompt_rows(args)),
        args=GRPOConfig(**trl_config(args, dtype, out / "trainer")), callbacks=[StepRecorder()])
    generation = trainer.vllm_generation
    generation.generate = timed("sample", generation.generate)
    generation.sync_weights = timed("sync", generation.sync_weights)
    trainer.train()
    record = {"framework": "trl", "dtype": dtype, "steps": steps,
              "torch_peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
              "versions": {"trl": trl.__version__, "vllm": vllm.__version__, "torch": torch.__version__,
                           "transformers": transformers.__version__}}
    (out / "trl.json").write_text(json.dumps(record, indent=1))


# --- precision-oat's run, read back ---


def ours_steps(rows: list[dict], responses_per_step: int) -> list[dict]:
    """precision-oat's metrics.jsonl rows as step records of the same shape as TRL's."""
    steps = []
    for row in rows:
        parts = {name: sum(row.get(f"perf/time/{k}", 0.0) for k in keys) for name, keys in OURS_PARTS.items()}
        steps.append({"step_s": sum(parts.values()), "parts": parts,
                      "tokens": row["response/length_mean"] * responses_per_step, "reward": row["reward/mean"],
                      "own": {k: row[k] for k in OURS_OWN_KEYS if k in row},
                      "lab": {k: row[f"mismatch/{k}"] for k in LAB_KEYS}})
    return steps


# --- both: the figures and the table ---


def summarize(steps: list[dict], warmup: int) -> dict:
    """The figures of one run from its step records (module docstring); times over the steps after ``warmup``."""
    timed = steps[warmup:]
    if not timed:
        return {"steps": len(steps)}
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    return {
        "steps": len(steps), "timed_steps": len(timed),
        "step_s": statistics.median(s["step_s"] for s in timed),
        "parts_s": {p: statistics.median(s["parts"][p] for s in timed) for p in PARTS},
        "tokens_per_s": sum(s["tokens"] for s in timed) / sum(s["step_s"] for s in timed),
        "response_tokens_mean": mean([s["tokens"] for s in steps]),
        "reward_first_last": [steps[0].get("reward"), steps[-1].get("reward")],
        # Over the steps: the lowest of the per-step minima, the highest of the maxima, the mean of the rest.
        "own": {k: {"min": min, "max": max}.get(k.rsplit("/", 1)[-1], mean)([s["own"][k] for s in steps if k in s["own"]])
                for k in steps[0]["own"]},
        "lab": {k: mean([s["lab"][k] for s in steps]) for k in LAB_KEYS},
    }


def ratios(ours: dict, theirs: dict) -> dict:
    """precision-oat / TRL of the step time and of the generated tokens per second."""
    if "step_s" not in ours or "step_s" not in theirs:
        return {}
    return {"step_time": ours["step_s"] / theirs["step_s"], "tokens_per_s": ours["tokens_per_s"] / theirs["tokens_per_s"]}


def own_text(own: dict) -> str:
    """A framework's own mismatch figures, shortened: mean |Δlogp| per token, and TRL's range of IS ratios."""
    if "sampling/sampling_logp_difference/mean" in own:
        return (f"Δlogp {own['sampling/sampling_logp_difference/mean']:.2e}, IS ratio "
                f"{own['sampling/importance_sampling_ratio/min']:.2f}–{own['sampling/importance_sampling_ratio/max']:.2f}")
    if "mismatch/abs_logp_diff_mean" in own:
        return f"Δlogp {own['mismatch/abs_logp_diff_mean']:.2e}"
    return "–"


def table(results: dict, responses: int) -> str:
    """One Markdown row per dtype and framework (``responses`` a step), then the ratios."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for dtype, runs in results.items():
        for name in ("trl", "precision-oat"):
            run = runs.get(name)
            if run is None:
                continue
            s = run.get("summary", {})
            if "step_s" not in s:
                lines.append(f"| {dtype} | {name} | – | did not run ({run.get('exit')}) |" + " |" * (len(COLUMNS) - 4))
                continue
            split = " / ".join(f"{s['parts_s'][p]:.2f}" for p in PARTS)
            peak = run.get("gpu_peak_gib")
            reward = " / ".join("–" if r is None else f"{r:.3f}" for r in s["reward_first_last"])
            lines.append(f"| {dtype} | {name} | {s['timed_steps']} | {s['step_s']:.2f} | {split} | "
                         f"{s['response_tokens_mean'] / responses:.0f} | {s['tokens_per_s']:,.0f} | "
                         f"{'–' if peak is None else f'{peak:.1f}'} | {own_text(s['own'])} | "
                         f"{s['lab']['abs_logp_diff_mean']:.2e} | {s['lab']['k3']:.2e} | {reward} |")
    for dtype, runs in results.items():
        r = runs.get("ratio") or {}
        if r:
            lines.append(f"\n{dtype}, precision-oat / TRL: step time {r['step_time']:.2f}x, "
                         f"generated tok/s {r['tokens_per_s']:.2f}x")
    return "\n".join(lines)


# --- running the two ---


def parse_memory_used(text: str) -> float:
    """MiB in use summed over the GPUs, from ``nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits``."""
    return float(sum(int(line) for line in text.split() if line.strip()))


def gpu_memory_used_mib() -> Optional[float]:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return parse_memory_used(done.stdout) if done.returncode == 0 else None


class MemoryPoll:
    """The peak of the device memory in use while the block runs, polled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.stop = interval, threading.Event()
        self.baseline = self.peak = gpu_memory_used_mib()
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def poll(self):
        while not self.stop.wait(self.interval):
            used = gpu_memory_used_mib()
            if used is not None and self.peak is not None:
                self.peak = max(self.peak, used)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()

    @property
    def peak_gib(self) -> Optional[float]:
        return None if self.peak is None else (self.peak - self.baseline) / 1024


def run_child(command: list[str], log: Path, timeout_s: float) -> dict:
    """Run one framework's process, its output in ``log``; its exit, wall time and device memory peak."""
    start = time.monotonic()
    with MemoryPoll() as memory, log.open("w") as sink:
        try:
            exit_code = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout_s,
                                       env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
        except subprocess.TimeoutExpired:
            exit_code = f"stopped after {timeout_s:.0f} s"
    return {"exit": exit_code, "wall_s": time.monotonic() - start, "gpu_peak_gib": memory.peak_gib,
            "command": " ".join(command[1:])}


def dtype_checkpoint(model: Path, dtype: Dtype, folder: Path) -> Path:
    """``model`` saved again with its weights (and its config's dtype) in ``dtype``, with its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "config.json").is_file():
        weights = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        weights.to(getattr(torch, TORCH_DTYPES[dtype])).save_pretrained(folder)
        AutoTokenizer.from_pretrained(model).save_pretrained(folder)
    return folder


def compare(args: PeerArgs) -> dict:
    args.output.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    for dtype in args.dtypes:
        checkpoint = dtype_checkpoint(args.model, dtype, args.output / "checkpoints" / f"model-{dtype}")
        runs = results[dtype] = {}
        for name in args.frameworks:
            out = args.output / f"{name}-{dtype}"
            if name == "trl":
                out.mkdir(parents=True, exist_ok=True)
                flags = [f"--{k.replace('_', '-')}" for k in ("model", "output", "trl_checkpoint")]
                command = [sys.executable, __file__, flags[0], str(args.model), flags[1], str(out), flags[2],
                           str(checkpoint), "--dtypes", dtype, *settings_flags(args)]
            else:
                command = ours_command(args, checkpoint, dtype, out)
            # The last process's memory back with the device before the next vLLM measures what is free.
            time.sleep(5)
            run = runs[name] = run_child(command, args.output / f"{name}-{dtype}.log", args.run_timeout_s)
            print(f"{dtype} {name}: exit {run['exit']}, {run['wall_s']:.0f} s", flush=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(args).items()}
    return write_report(args.output, settings, results)


def write_report(output: Path, settings: dict, results: dict) -> dict:
    """Each run's figures from its files in ``output``, the ratios, peer_trl.json and the printed table."""
    for dtype, runs in results.items():
        for name in ("trl", "precision-oat"):
            if name not in runs:
                continue
            out = output / f"{name}-{dtype}"
            steps = read_steps(name, out, settings["prompts_per_step"] * settings["num_samples"])
            runs[name]["summary"] = summarize(steps, settings["warmup_steps"]) if steps else {}
            if name == "trl" and (out / "trl.json").is_file():
                record = json.loads((out / "trl.json").read_text())
                runs[name].update(torch_peak_gib=record["torch_peak_gib"], versions=record["versions"])
        if "trl" in runs and "precision-oat" in runs:
            runs["ratio"] = ratios(runs["precision-oat"]["summary"], runs["trl"]["summary"])
    report = {"settings": settings, "results": results}
    (output / "peer_trl.json").write_text(json.dumps(report, indent=1))
    print(table(results, settings["prompts_per_step"] * settings["num_samples"]), flush=True)
    return report


def settings_flags(args: PeerArgs) -> list[str]:
    """The shared settings as flags of this script, for the TRL child."""
    names = ("steps", "warmup_steps", "prompts_per_step", "num_samples", "max_new_tokens", "learning_rate",
             "temperature", "micro_batch_size", "vllm_gpu_memory_utilization", "seed")
    return [token for n in names for token in (f"--{n.replace('_', '-')}", str(getattr(args, n)))]


def read_steps(name: str, out: Path, responses_per_step: int) -> list[dict]:
    if name == "trl":
        path = out / "trl.json"
        return json.loads(path.read_text())["steps"] if path.is_file() else []
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return ours_steps([r for r in rows if "perf/time/sample" in r], responses_per_step)


def main(argv: Optional[Sequence[str]] = None) -> None:
    from precision_oat.errors import UserError

    args = tyro.cli(PeerArgs, args=argv)
    try:
        args.check()
    except UserError as e:
        sys.exit(f"error: {e}")
    if args.report_only:
        saved = json.loads((args.output / "peer_trl.json").read_text())
        # Each run's exit, wall time and memory as the run recorded them; the figures from its files.
        write_report(args.output, saved["settings"], saved["results"])
    elif args.trl_checkpoint is not None:
        run_trl(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
