"""``torchrun --nproc-per-node 2 … --sampler vllm``: a vLLM engine in every rank (or one engine over both), on CPU
(gloo) with the DeepSpeed learner, logs what one process logs, and an engine that fails to start on one rank stops
both in one line."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from precision_oat.samplers.vllm_cpu_shm import SHM_FOLDER
from tests.backends.test_data_parallel import (assert_rank_times, launch, one_process_runs, rank_time_keys, rows,
                                              without_clocks)

pytestmark = [pytest.mark.requires_vllm]

COMMON = ["--algo", "grpo", "--dtype", "fp32", "--learning-rate", "5e-4", "--learner", "deepspeed", "--zero-stage", "1",
          "--prompts-per-step", "8", "--num-samples", "4", "--max-new-tokens", "4", "--sampler", "vllm",
          "--vllm-kv-cache-gb", "0.25", "--wandb-mode", "disabled", "--probe-dtypes", "--log-every", "1000"]
# Packed under 12 tokens, the two ranks' halves of a rollout cut into different numbers of passes.
PACKED = ["--micro-batch-tokens", "12"]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, embedded_policy_dir):
    """One process with its vLLM engine: what two ranks must log."""
    return one_process_runs(tmp_path_factory, embedded_policy_dir, COMMON, PACKED)


@pytest.mark.slow
@pytest.mark.parametrize("zero, packed, ranks_per_engine", [(1, False, 1), (3, False, 1), (2, True, 1), (1, False, 2)])
def test_two_ranks_with_a_vllm_engine_each_log_what_one_process_logs(tmp_path, embedded_policy_dir, one_process,
                                                                      zero, packed, ranks_per_engine):
    # ranks_per_engine 2: both ranks form one tensor-parallel engine, which samples every prompt.
    flags = [*COMMON, *(PACKED if packed else []), "--vllm-tensor-parallel-size", str(ranks_per_engine), "--steps", "2",
             "--output-dir", str(tmp_path)]
    flags[flags.index("--zero-stage") + 1] = str(zero)
    done = launch("--model", str(embedded_policy_dir), *flags, processes=2)
    assert done.returncode == 0, done.stdout + done.stderr
    # One engine over both ranks shares memory under names every run under torchrun would take again: none is left.
    assert not [p.name for p in SHM_FOLDER.iterdir() if "cpushm" in p.name]
    a, b = one_process[packed], rows(tmp_path)
    assert [r["step"] for r in b] == [1, 2]
    assert any(r["train/grad_norm"] > 0 for r in a), "no gradient: the comparison would prove nothing"
    for x, y in zip(a, b, strict=True):
        assert set(y) == set(x) | rank_time_keys(2)
        assert_rank_times(y, 2)
        for key in x:
            group = key.split("/")[0]
            if group in ("reward", "response", "skipped"):
                # Every response draws from its row's seed, whichever engine samples it: the same tokens.
                assert y[key] == x[key], key
            elif group in ("loss", "ratio", "phantom", "mismatch", "train", "precision"):
                # fp32: sums taken in another order (two engines' batches or one engine's matmuls split in two, each
                # rank's passes, the all-reduce) round apart, and fp32's sampler–trainer gaps are that rounding
                # (1e-7 to 1e-5 here).
                assert y[key] == pytest.approx(x[key], rel=1e-4, abs=2e-5), key
            # perf/ and time/ are clocks; they cannot be equal.


@pytest.mark.slow
def test_one_process_under_torchrun_builds_its_engine_on_the_launchers_group_and_logs_what_the_plain_command_logs(
        tmp_path, embedded_policy_dir, one_process):
    # torchrun's agent makes every rendezvous of its workers a client of its own store, so an engine that made a
    # process group alone, at a port of its choosing, waited for ever (vLLM 0.26 on an H200); the engine now joins the
    # launcher's group, as with more processes.
    done = launch("--model", str(embedded_policy_dir), *COMMON, "--steps", "2", "--output-dir", str(tmp_path),
                  torchrun=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "'distributed_executor_backend': 'external_launcher'" in done.stdout + done.stderr
    a, b = one_process[False], rows(tmp_path)
    for x, y in zip(a, b, strict=True):
        assert set(x) == set(y)
        for key in x:
            if key.split("/")[0] in ("reward", "response", "skipped", "loss", "ratio", "mismatch", "train"):
                # One process either way: the same engine, the same samples; fp32 rounding aside.
                assert y[key] == pytest.approx(x[key], rel=1e-4, abs=2e-5), key


# Rank 1 asks its vLLM for a KV cache layout that the CPU attention backend does not offer; rank 0 starts as usual.
ONE_RANK_REFUSES = """
import os, runpy
if os.environ["RANK"] == "1":
    os.environ["VLLM_KV_CACHE_LAYOUT"] = "NHD"
runpy.run_module("precision_oat.main", run_name="__main__")
"""


@pytest.mark.slow
def test_an_engine_that_fails_to_start_on_one_rank_stops_both_in_one_line(tmp_path, embedded_policy_dir):
    entry = tmp_path / "one_rank_refuses.py"
    entry.write_text(ONE_RANK_REFUSES)
    done = launch("--model", str(embedded_policy_dir), *COMMON, "--steps", "1", "--output-dir", str(tmp_path / "run"),
                  processes=2, entry=(str(entry),), timeout=240)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    lines = {line for line in output.splitlines() if line.startswith("error: ")}
    # Rank 0 waits for rank 1, inside one of vLLM's collectives or for its word, and stops naming rank 1 (or the
    # launcher stops it first).
    assert len(lines) == 1, output
    [line] = lines
    assert line.startswith("error: the vllm sampler's start failed on rank 1: vLLM could not load the model at "), line
    assert "VLLM_KV_CACHE_LAYOUT=NHD does not satisfy every supported set" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def training_pid(rank: int, out: Path) -> int:
    """The pid of the rank ``rank`` of torchrun's run into ``out`` (not its launcher, nor another test's run)."""
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(out).encode() in cmdline and b"torch.distributed.run" not in cmdline and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no process of rank {rank} writes {out}")


def latest_step(out: Path) -> int:
    latest = out / "checkpoints" / "latest"
    return int(latest.read_text().strip().removeprefix("step_")) if latest.is_file() else 0


@pytest.mark.slow
def test_a_run_whose_rank_is_killed_resumes_bit_for_bit(tmp_path, embedded_policy_dir):
    flags = ["--model", str(embedded_policy_dir), *COMMON, "--save-every", "1"]
    killed = tmp_path / "killed"
    run = launch(*flags, "--steps", "100000", "--output-dir", str(killed), processes=2, wait=False)
    try:
        deadline = time.time() + 240
        while latest_step(killed) < 1:
            assert run.poll() is None and time.time() < deadline, run.stdout.read() if run.poll() is not None else "slow"
            time.sleep(0.2)
        os.kill(training_pid(1, killed), signal.SIGKILL)
        assert run.wait(timeout=120) != 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    # Two more steps from the last checkpoint, against a run that never stopped.
    steps = str(latest_step(killed) + 2)
    done = launch(*flags, "--steps", steps, "--resume", "--output-dir", str(killed), processes=2)
    assert done.returncode == 0, done.stdout + done.stderr
    whole = tmp_path / "whole"
    done = launch(*flags, "--steps", steps, "--output-dir", str(whole), processes=2)
    assert done.returncode == 0, done.stdout + done.stderr
    a, b = rows(whole), rows(killed)
    assert [r["step"] for r in b] == [r["step"] for r in a] == list(range(1, int(steps) + 1))
    for x, y in zip(a, b):
        # Every value but the clocks, exactly: the checkpoint holds the fp32 weights and Adam state, each engine is
        # given them again at the resume, and every response draws from its row's seed of that step.
        assert without_clocks(y) == without_clocks(x), x["step"]
