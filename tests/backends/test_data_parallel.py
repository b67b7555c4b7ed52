"""Data parallelism: ``torchrun --nproc-per-node 2`` on CPU (gloo) with the DeepSpeed learner means
the same run as one process, resumes, and fails in one line (or at once) when the setup is wrong."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from precision_oat.distributed.world import World, check_layout, check_same_config
from precision_oat.errors import UserError
from precision_oat.runs.folder import STEP_PARTS

COMMON = ["--algo", "grpo", "--dtype", "fp32", "--learning-rate", "5e-4", "--learner", "deepspeed", "--zero-stage", "1",
          "--prompts-per-step", "8", "--num-samples", "4", "--max-new-tokens", "4", "--wandb-mode", "disabled",
          "--probe-dtypes", "--log-every", "1000"]


def launch(*flags, processes: int = 1, wait: bool = True, timeout: int = 600,
           entry: tuple[str, ...] = ("-m", "precision_oat.main"), torchrun: bool = False):
    """The command, plainly when it is one process (unless ``torchrun``), else under torchrun."""
    runner = [sys.executable, *entry] if processes == 1 and not torchrun else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes), *entry]
    # Not the rendezvous of a process group this test process may hold (a DeepSpeed learner built in-process).
    inherited = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK",
                                                                   "WORLD_SIZE")}
    env = {**inherited, "OMP_NUM_THREADS": "1"}
    if not wait:
        return subprocess.Popen(runner + list(flags), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(runner + list(flags), env=env, capture_output=True, text=True, timeout=timeout)


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def without_clocks(row: dict) -> dict:
    """A metrics row but its clocks (``perf/…``, ``time/…``): what two runs of one seed log alike, to the bit."""
    return {k: v for k, v in row.items() if not k.startswith(("perf/", "time/"))}


def rank_time_keys(ranks: int) -> set[str]:
    """The keys a run of ``ranks`` processes logs beside one process's: each rank's time split and the slowest's."""
    return {f"perf/time_{who}/{part}" for who in [*(f"rank{r}" for r in range(ranks)), "slowest"] for part in STEP_PARTS}


def assert_rank_times(row: dict, ranks: int) -> None:
    """``perf/time/<part>`` is rank 0's own, and the slowest rank's is the longest of the ranks'."""
    for part in STEP_PARTS:
        own = [row[f"perf/time_rank{r}/{part}"] for r in range(ranks)]
        assert row[f"perf/time/{part}"] == own[0] and row[f"perf/time_slowest/{part}"] == max(own), part
    assert row["perf/time_slowest/update"] > 0


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "checkpoints" / (folder / "checkpoints" / "latest").read_text().strip() / "model.safetensors")


def test_two_processes_end_where_one_does_and_resume(tmp_path, embedded_policy_dir):
    model = ["--model", str(embedded_policy_dir)]
    one, two = tmp_path / "one", tmp_path / "two"
    done = launch(*model, *COMMON, "--steps", "3", "--output-dir", str(one))
    assert done.returncode == 0, done.stdout + done.stderr
    # Two processes: two steps, then a resumed third.
    for extra in (["--steps", "2"], ["--steps", "3", "--resume"]):
        done = launch(*model, *COMMON, *extra, "--output-dir", str(two), processes=2)
        assert done.returncode == 0, done.stdout + done.stderr
    a, b = rows(one), rows(two)
    assert [r["step"] for r in b] == [1, 2, 3]
    for x, y in zip(a, b):
        assert set(y) == set(x) | rank_time_keys(2)
        assert_rank_times(y, 2)
    # The same samples (each response draws from the stream of its place in the whole batch) …
    assert [r["reward/mean"] for r in a] == [r["reward/mean"] for r in b]
    assert a[0]["mismatch/abs_logp_diff_mean"] == b[0]["mismatch/abs_logp_diff_mean"]
    # … the same gradients up to fp32 rounding of a sum taken in another order …
    for x, y in zip(a, b):
        assert abs(x["train/grad_norm"] - y["train/grad_norm"]) <= 1e-4 * x["train/grad_norm"]
    assert any(r["train/grad_norm"] > 0 for r in a)
    # … so the same weights, written once, with both ranks' optimiser shards.
    wa, wb = weights(one), weights(two)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-5
    shards = sorted(p.name for p in (two / "checkpoints" / "step_000003" / "deepspeed").glob("zero_pp_rank_*"))
    assert len(shards) == 2
    assert json.loads((two / "summary.json").read_text())["steps"] == 3


# Rows of 3–12 tokens packed under 24: the ranks' halves of a rollout pack into different numbers of passes.
PACKED = ["--max-new-tokens", "8", "--micro-batch-tokens", "24"]


def one_process_runs(tmp_path_factory, model_dir, common: list[str], packed: list[str]) -> dict[bool, list[dict]]:
    """The metrics of two steps of one process, with the ``packed`` flags and without: what two must reproduce."""
    out = {}
    for pack in (True, False):
        folder = tmp_path_factory.mktemp(f"one-{pack}")
        done = launch("--model", str(model_dir), *common, *(packed if pack else []), "--steps", "2",
                      "--output-dir", str(folder))
        assert done.returncode == 0, done.stdout + done.stderr
        out[pack] = rows(folder)
    return out


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, embedded_policy_dir):
    """The run every ZeRO stage on two processes must reproduce."""
    return one_process_runs(tmp_path_factory, embedded_policy_dir, COMMON, PACKED)


@pytest.mark.slow
@pytest.mark.parametrize("zero, packed", [(1, True), (2, True), (3, True), (2, False), (3, False)])
def test_every_zero_stage_on_two_processes_logs_what_one_process_logs(tmp_path, embedded_policy_dir, one_process,
                                                                      zero, packed):
    # Packed, the two ranks' passes differ in number; ZeRO-2/3 pair a collective per pass, so the rank with fewer
    # pads (before, the run hung here).
    flags = [*COMMON, *(PACKED if packed else []), "--steps", "2", "--output-dir", str(tmp_path)]
    flags[flags.index("--zero-stage") + 1] = str(zero)
    done = launch("--model", str(embedded_policy_dir), *flags, processes=2, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for a, b in zip(one_process[packed], rows(tmp_path), strict=True):
        assert a["reward/mean"] == b["reward/mean"]
        for key in a:
            if key.split("/")[0] in ("loss", "ratio", "phantom", "mismatch", "train", "precision"):
                # fp32: a sum taken in another order (each rank's passes, the all-reduce) rounds apart, and the
                # sampler–trainer gaps of fp32 are that rounding (~1e-6).
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=2e-5), key


def test_without_rescoring_two_processes_measure_the_mismatch_of_the_whole_batch(tmp_path, embedded_policy_dir):
    # Each rank scores only its rows in its update; the mismatch is taken over every row, gathered. In bf16, where
    # the mismatch is far above the rounding that two processes' other batches cause.
    flags = ["--model", str(embedded_policy_dir), *COMMON, "--no-rescore", "--steps", "1"]
    flags[flags.index("--dtype") + 1] = "bf16"
    for processes in (1, 2):
        done = launch(*flags, "--output-dir", str(tmp_path / str(processes)), processes=processes)
        assert done.returncode == 0, done.stdout + done.stderr
    [a], [b] = rows(tmp_path / "1"), rows(tmp_path / "2")
    for key in ("mismatch/abs_logp_diff_mean", "mismatch/k3", "mismatch/seq_logratio_std"):
        assert b[key] == pytest.approx(a[key], rel=0.05), key


def test_bf16_on_two_processes_draws_the_samples_of_one(tmp_path, embedded_policy_dir):
    flags = ["--model", str(embedded_policy_dir), *COMMON, "--steps", "2"]
    flags[flags.index("--dtype") + 1] = "bf16"
    for processes in (1, 2):
        done = launch(*flags, "--output-dir", str(tmp_path / str(processes)), processes=processes)
        assert done.returncode == 0, done.stdout + done.stderr
    a, b = rows(tmp_path / "1"), rows(tmp_path / "2")
    assert a[0]["reward/mean"] == b[0]["reward/mean"]
    assert a[0]["mismatch/abs_logp_diff_mean"] == b[0]["mismatch/abs_logp_diff_mean"]
    # bf16 compute weights round a gradient summed in another order differently, within bf16's resolution
    # (so the second step samples from weights a rounding apart, and a sample may come out otherwise).
    wa, wb = weights(tmp_path / "1"), weights(tmp_path / "2")
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-2


def test_a_batch_that_does_not_split_is_refused_in_one_line(tmp_path, embedded_policy_dir):
    flags = [f for f in COMMON]
    flags[flags.index("--prompts-per-step") + 1] = "3"
    done = launch("--model", str(embedded_policy_dir), *flags, "--steps", "1", "--output-dir", str(tmp_path / "r"),
                  processes=2)
    assert done.returncode != 0
    assert "error: --prompts-per-step 3 does not split over 2 processes; use a multiple of 2" in done.stdout + done.stderr


def test_a_folder_refused_on_rank_0_stops_every_rank_in_one_line(tmp_path, embedded_policy_dir):
    from precision_oat.runs.folder import RUN_MARKER

    # A run's folder: rank 0 alone reads it, and refuses a new run there.
    out = tmp_path / "run"
    out.mkdir()
    (out / RUN_MARKER).write_text("{}")
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    done = launch("--model", str(embedded_policy_dir), *COMMON, "--steps", "1", "--output-dir", str(out), processes=2)
    assert done.returncode != 0
    text = done.stdout + done.stderr
    # Every rank says why (as a refusal of the flags does), and none fails in the exchange rank 0 left.
    assert text.count(f"error: --output-dir {out} already holds a run") == 2, text
    assert "[rank1]: Traceback" not in text, text


OVERFLOWING_LEARNER = """
from precision_oat.algorithms import GRPOMixin, ISPGMixin
from precision_oat.learners.deepspeed_learner import DeepSpeedLearner


class Overflowing(ISPGMixin, GRPOMixin, DeepSpeedLearner):
    def backward(self, loss, last_micro_batch):
        super().backward(loss * float("inf"), last_micro_batch)
"""


def test_a_run_whose_every_step_overflowed_fails_on_every_rank_in_one_line(tmp_path, embedded_policy_dir,
                                                                          monkeypatch):
    # Gradients of inf: DeepSpeed skips every optimiser step.
    (tmp_path / "overflowing.py").write_text(OVERFLOWING_LEARNER)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    done = launch("--model", str(embedded_policy_dir), *COMMON, "--steps", "2", "--learner-class",
                  "overflowing:Overflowing", "--output-dir", str(out), processes=2)
    assert done.returncode != 0
    text = done.stdout + done.stderr
    # Each rank ends with the line, after rank 0 wrote the summary.
    assert text.count("error: every optimiser step of the run overflowed and was skipped (2)") == 2, text
    assert "[rank1]: Traceback" not in text, text
    assert json.loads((out / "summary.json").read_text())["skipped_steps"] == 2


# The command, with the end-of-run probe failing as out of GPU memory makes it fail (it runs on rank 0 alone).
PROBE_OUT_OF_MEMORY = """
import runpy
from precision_oat.backends.local import loop


def out_of_memory(*args, **kwargs):
    import torch

    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

loop.probe_mismatch = out_of_memory
runpy.run_module("precision_oat.main", run_name="__main__")
"""


def test_a_probe_out_of_memory_on_rank_0_stops_every_rank_in_one_line(tmp_path, embedded_policy_dir):
    entry = tmp_path / "probe_oom.py"
    entry.write_text(PROBE_OUT_OF_MEMORY)
    out = tmp_path / "run"
    done = launch("--model", str(embedded_policy_dir), *COMMON, "--steps", "1", "--probe-dtypes", "fp32",
                  "--output-dir", str(out), processes=2, entry=(str(entry),))
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert text.count("error: out of GPU memory in the end-of-run mismatch probe (CUDA out of memory") == 2, text
    assert "[rank1]: Traceback" not in text, text
    assert not (out / "summary.json").exists() and [r["step"] for r in rows(out)] == [1]


def test_when_a_rank_dies_the_others_stop(tmp_path, embedded_policy_dir):
    out = tmp_path / "run"
    run = launch("--model", str(embedded_policy_dir), *COMMON, "--steps", "100000", "--output-dir", str(out),
                 processes=2, wait=False)
    try:
        deadline = time.time() + 300
        while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text()):
            assert run.poll() is None and time.time() < deadline, run.stdout.read() if run.poll() is not None else "slow"
            time.sleep(0.5)
        os.kill(rank_pid(1), signal.SIGKILL)
        assert run.wait(timeout=120) != 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


# The command, with one process killed at step 2 after the step's checkpoint is written and before its line is:
# rank 0 as it writes the line, or rank 1 as the ranks exchange their time splits for it.
DIES_BEFORE_THE_LINE_OF_STEP_2 = """
import os, runpy, signal
from precision_oat.backends.local import loop
from precision_oat.runs.log import RunLog

def dying(real):
    def at_step_2(first, metrics, *rest, **kwargs):
        if metrics["step"] == 2 and os.environ.get("RANK", "0") == "{rank}":
            os.kill(os.getpid(), signal.SIGKILL)
        return real(first, metrics, *rest, **kwargs)
    return at_step_2

{target} = dying({target})
runpy.run_module("precision_oat.main", run_name="__main__")
"""


@pytest.mark.parametrize("processes, target, rank", [(1, "RunLog.log", 0), (2, "loop.rank_times", 1)])
def test_a_run_killed_between_a_checkpoint_and_its_line_resumes_with_no_step_missing(
        tmp_path, embedded_policy_dir, processes, target, rank):
    entry = tmp_path / "dies.py"
    entry.write_text(DIES_BEFORE_THE_LINE_OF_STEP_2.format(target=target, rank=rank))
    flags = ["--model", str(embedded_policy_dir), *COMMON, "--save-every", "1", "--steps", "4"]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    died = launch(*flags, "--output-dir", str(killed), processes=processes, entry=(str(entry),))
    assert died.returncode != 0, died.stdout + died.stderr
    # Step 2's checkpoint was written but never committed: the resume goes on from step 1, the last line.
    assert [r["step"] for r in rows(killed)] == [1]
    assert (killed / "checkpoints" / "latest").read_text() == "step_000001"
    for folder, extra in ((killed, ["--resume"]), (whole, [])):
        done = launch(*flags, *extra, "--output-dir", str(folder), processes=processes)
        assert done.returncode == 0, done.stdout + done.stderr
    a, b = rows(whole), rows(killed)
    assert [r["step"] for r in b] == [r["step"] for r in a] == [1, 2, 3, 4]
    for x, y in zip(a, b):
        assert without_clocks(y) == without_clocks(x), x["step"]


def rank_pid(rank: int) -> int:
    """The pid of the training process with RANK=rank (torchrun's children)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"precision_oat.main" in cmdline and b"torch.distributed.run" not in cmdline and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no process with RANK={rank}")


def test_layout_checks_name_the_flag():
    two = World(rank=0, size=2)
    check_layout(two, "deepspeed", 8, 4, 16, {"eval": list(range(10))})
    with pytest.raises(UserError, match="needs --learner deepspeed"):
        check_layout(two, "builtin", 8, 4, None, {})
    with pytest.raises(UserError, match="--train-batch-size 3 does not split over 2 processes"):
        check_layout(two, "deepspeed", 8, 4, 3, {})
    with pytest.raises(UserError, match="--train-batch-size 12 must divide the rollout.s 32 responses .*; "
                                        "use a divisor of 32 that is a multiple of 2"):
        check_layout(two, "deepspeed", 8, 4, 12, {})
    with pytest.raises(UserError, match="evaluation set 'eval' has 9 questions"):
        check_layout(two, "deepspeed", 8, 4, None, {"eval": list(range(9))})
    # One process takes any layout.
    check_layout(World(), "builtin", 3, 4, 5, {"eval": [1]})


def test_shares_cover_the_batch_in_rank_order():
    items = list(range(12))
    shares = [World(rank=r, size=3).share(items) for r in range(3)]
    assert [first for first, _ in shares] == [0, 4, 8]
    assert [x for _, part in shares for x in part] == items


def test_the_ranks_of_one_engine_take_the_same_share():
    items = list(range(12))
    # Four ranks, two per engine: ranks 0 and 1 sample items 0–5, ranks 2 and 3 items 6–11.
    shares = [World(rank=r, size=4).share(items, ranks_per_share=2) for r in range(4)]
    assert shares == [(0, items[:6]), (0, items[:6]), (6, items[6:]), (6, items[6:])]


def _start_together(rank: int, port: int, fails_on: int, reports) -> None:
    from datetime import timedelta

    # The store outlives the ranks, as torchrun's agent holds it: a rank that fails leaves, its word stays.
    store = torch.distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    torch.distributed.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timedelta(seconds=60))
    try:
        def start():
            if rank == fails_on:
                raise ValueError("no room for the KV cache\n(a second line that the report leaves out)")
            return f"engine {rank}"

        try:
            reports.put((rank, World(rank=rank, size=2).start_together("the engine's start", start)))
        except UserError as e:
            reports.put((rank, str(e)))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("fails_on", [None, 0, 1])
def test_a_start_that_fails_on_one_rank_stops_every_rank_naming_it(fails_on):
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    reports = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(_start_together, args=(store.port, fails_on, reports), nprocs=2, start_method="spawn")
    got = sorted(reports.get() for _ in range(2))
    if fails_on is None:
        assert got == [(0, "engine 0"), (1, "engine 1")]
    else:
        # The rank that failed stops at once; the other waits for its word (no collective to hang in) and stops too.
        line = f"the engine's start failed on rank {fails_on}: no room for the KV cache"
        assert got == [(0, line), (1, line)]


def two_ranks(target, *args) -> list:
    """What ``target(rank, port, *args, reports)`` puts on ``reports`` in two spawned processes, one item each,
    sorted: ``port`` is a free one for their process group."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reports = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(target, args=(port, *args, reports), nprocs=2, start_method="spawn")
    return sorted(reports.get() for _ in range(2))


def _compare_configs(rank: int, port: int, failures) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        check_same_config(World(rank=rank, size=2), {"dtype": "bf16", "seed": rank, "steps": 4})
    except UserError as e:
        failures.put(str(e))
    finally:
        torch.distributed.destroy_process_group()


def test_ranks_started_with_other_flags_are_refused():
    line = "rank 1 was started with other flags than rank 0 (seed); start every rank with the same command"
    assert two_ranks(_compare_configs) == [line] * 2


# The tensor collectives the World may call, and where their tensors were, per rank.
TENSOR_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce_scatter_tensor")


def _record_collective_devices(handed: list) -> None:
    """Note the device of every tensor handed to a tensor collective (the collective then runs as usual)."""
    for name in TENSOR_COLLECTIVES:
        real = getattr(torch.distributed, name)

        def noting(*args, _real=real, **kwargs):
            for arg in args:
                handed.extend(str(t.device) for t in (arg if isinstance(arg, list) else [arg]) if isinstance(t, torch.Tensor))
            return _real(*args, **kwargs)

        setattr(torch.distributed, name, noting)


def _exchange(rank: int, port: int, device_type: str, backend: str, reports) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank % torch.cuda.device_count()) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cuda":
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(backend, rank=rank, world_size=2)
    try:
        served = sorted({part.split(":")[0] for part in torch.distributed.get_backend_config().split(",")})
        handed = []
        _record_collective_devices(handed)
        world = World(rank=rank, size=2, local_rank=rank, device=device)
        results = [world.reduce({"a": float(rank), "b": 2.0}), world.reduce({"m": float(rank)}, "max"), world.any(rank == 1),
                   world.gather_rows(torch.full((1, 2), float(rank), device=device)).tolist()]
        reports.put((rank, str(device), served, handed, results))
    finally:
        torch.distributed.destroy_process_group()


def collective_reports(device_type: str, backend: str) -> list:
    return two_ranks(_exchange, device_type, backend)


def assert_collectives_on_the_world_device(reports: list) -> None:
    for rank, device, served, handed, results in reports:
        assert results == [{"a": 0.5, "b": 2.0}, {"m": 1.0}, True, [[0.0, 0.0], [1.0, 1.0]]]
        assert handed, "no tensor collective ran"
        # NCCL serves CUDA tensors only: a CPU tensor handed to it fails every multi-GPU run.
        assert set(handed) == {device}, f"rank {rank} on {device} handed tensors on {sorted(set(handed))}"
        assert torch.device(device).type in served


def test_collectives_hand_tensors_on_the_device_of_a_cpu_world():
    assert_collectives_on_the_world_device(collective_reports("cpu", "gloo"))


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_collectives_hand_cuda_tensors_on_a_cuda_world():
    # NCCL needs a GPU per rank; on one GPU, gloo (which serves CUDA tensors too) stands in as the transport.
    backend = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
    assert_collectives_on_the_world_device(collective_reports("cuda", backend))


def _save_twice_then_resume(rank: int, port: int, folder: Path, reports) -> None:
    """Two ranks of a DeepSpeed (ZeRO-1, CPU) learner save steps 1 and 2; rank 1's shard of step 2 is then torn.
    Reports whether the resume gave each rank back its own generator of step 1."""
    from datetime import timedelta

    from precision_oat.backends.local.driver import build_learner
    from precision_oat.rl.settings import learner_settings
    from precision_oat.runs.checkpoint import commit_checkpoint, resume_checkpoint, write_checkpoint
    from tests.conftest import byte_tokenizer, tiny_model
    from tests.backends.helpers import make_args

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    # A rank left waiting in a collective fails after a minute instead of hanging the test.
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    try:
        world = World(rank=rank, size=2, local_rank=rank)
        args = make_args(learner="deepspeed", zero_stage=1, dtype="fp32", algo="pg", num_samples=4)
        learner = build_learner(tiny_model(), learner_settings(args, torch.device("cpu"), world))
        built = []
        export_model = learner.export_model
        learner.export_model = lambda: built.append(rank) or export_model()
        torch.manual_seed(10 + rank)  # the ranks' generators differ, as their dropout draws make them in a run
        commit_checkpoint(write_checkpoint(folder, 1, learner, byte_tokenizer(), world), world=world)
        after_step_1 = torch.rand(3)
        commit_checkpoint(write_checkpoint(folder, 2, learner, byte_tokenizer(), world), world=world)
        world.barrier()  # rank 0 commits alone
        if rank == 1:
            shard = next((folder / "checkpoints" / "step_000002" / "deepspeed").glob("*zero_pp_rank_1_*optim_states.pt"))
            shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
        world.barrier()
        try:
            resumed = resume_checkpoint(folder, learner, world)[1]
        except Exception as e:  # noqa: BLE001 - reported to the test, which names it
            resumed = f"{type(e).__name__}: {e}"
        reports.put((rank, len(built), resumed, torch.equal(torch.rand(3), after_step_1)))
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def two_rank_checkpoints(tmp_path_factory):
    """(folder, [(rank, models it built while saving, step it resumed at, its own generator back)]) of
    :func:`_save_twice_then_resume`."""
    folder = tmp_path_factory.mktemp("two-ranks")
    return folder, two_ranks(_save_twice_then_resume, folder)


def _score_rows_of_other_lengths(rank: int, port: int, reports) -> None:
    """Two ZeRO-3 ranks (CPU) score rows of other lengths, so their output projections run in other numbers of
    chunks; then the gradient of one of them. Reports the largest gap to the same model scored alone."""
    from datetime import timedelta

    from precision_oat.backends.local.driver import build_learner
    from precision_oat.rl.scoring import token_logprobs
    from precision_oat.rl.settings import learner_settings
    from tests.backends.helpers import make_args
    from tests.conftest import tiny_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    try:
        # A vocabulary of 4,096 × 64 puts the tied embedding past ZeRO-3's persistence threshold (1e5 elements):
        # it is partitioned, and every call of the head gathers it.
        model = tiny_model(vocab=4096)
        ids = torch.randint(4096, (2, 24 if rank == 0 else 8), generator=torch.Generator().manual_seed(rank))
        mask = torch.ones_like(ids)
        expected = token_logprobs(model, ids, mask, 1.0, chunk_size=4)
        args = make_args(learner="deepspeed", zero_stage=3, dtype="fp32", algo="pg", logprob_chunk_size=4)
        learner = build_learner(model, learner_settings(args, torch.device("cpu"), World(rank=rank, size=2)))
        with torch.no_grad():
            scored = learner.forward_logprobs(ids, mask)
        learner.backward(-learner.forward_logprobs(ids, mask).sum(), last_micro_batch=True)
        reports.put((rank, float((scored - expected).abs().max())))
    except Exception as e:  # noqa: BLE001 - reported to the test, which names it
        reports.put((rank, f"{type(e).__name__}: {e}"))
    finally:
        torch.distributed.destroy_process_group()


def test_zero3_ranks_whose_rows_project_in_other_numbers_of_chunks_score_and_step_together():
    # Rank 0 projects 46 positions in 12 chunks of 4, rank 1 14 in 4: each call of the head gathers its weight
    # with every rank, so the rank with fewer chunks projects nothing the more times (before, both waited for ever).
    results = two_ranks(_score_rows_of_other_lengths)
    assert [rank for rank, _ in results] == [0, 1]
    for rank, gap in results:
        assert isinstance(gap, float) and gap < 1e-5, (rank, gap)


def test_only_rank_0_builds_the_model_it_checkpoints(two_rank_checkpoints):
    folder, reports = two_rank_checkpoints
    assert [(rank, built) for rank, built, *_ in reports] == [(0, 2), (1, 0)]
    assert (folder / "checkpoints" / "step_000001" / "model.safetensors").is_file()


def test_ranks_fall_back_together_when_one_cannot_read_the_newest_checkpoint(two_rank_checkpoints):
    _, reports = two_rank_checkpoints
    assert [(rank, step) for rank, _, step, _ in reports] == [(0, 1), (1, 1)]


def test_each_rank_resumes_with_its_own_random_generator(two_rank_checkpoints):
    # Dropout draws from each rank's own generator; with rank 0's on every rank a resumed run drew other masks.
    _, reports = two_rank_checkpoints
    assert [(rank, own) for rank, *_, own in reports] == [(0, True), (1, True)]


def test_a_resume_with_another_number_of_processes_is_refused_naming_the_one_recorded(two_rank_checkpoints):
    from precision_oat.runs.checkpoint import check_world_size

    folder, _ = two_rank_checkpoints
    with pytest.raises(UserError, match=r"^--resume: step_000001 was written by 2 processes and this run has 1; "
                                        r"resume with torchrun --nproc-per-node 2$"):
        check_world_size(folder / "checkpoints" / "step_000001", World())
    check_world_size(folder / "checkpoints" / "step_000001", World(rank=1, size=2))


def test_a_finished_run_with_a_gloo_group_ends_without_the_interpreters_teardown(tmp_path, embedded_policy_dir):
    # Left to the interpreter's exit, gloo's threads now and then abort a process whose run had finished.
    code = ("import atexit, runpy; atexit.register(print, 'the interpreter tore down'); "
            "runpy.run_module('precision_oat.main', run_name='__main__')")
    done = launch("--model", str(embedded_policy_dir), *COMMON, "--steps", "1", "--output-dir", str(tmp_path / "run"),
                  entry=("-c", code))
    assert done.returncode == 0, done.stdout + done.stderr
    # The run's last line came out (flushed), and nothing of the teardown ran after it.
    assert done.stdout.splitlines()[-1].startswith("time per step: "), done.stdout
    assert "the interpreter tore down" not in done.stdout
