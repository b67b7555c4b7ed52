"""The H200 scripts pass only flags their programs take.

They run only on the GPU machine, where a renamed flag costs a machine start. Each script runs here
with ``python3`` and ``sleep`` replaced by stand-ins that record the command line and return at once;
every recorded command line is then parsed by the real parser of the program it calls.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
import tyro

from precision_oat.compare.loading import NAME
from tests.conftest import REPO, load_script

RECORDER = """#!{python}
import json, os, sys, tempfile, time
time.sleep(float(os.environ.get("SECONDS_EACH", "0")))
fd, _ = tempfile.mkstemp(dir=os.environ["CALLS"], suffix=".json")
os.write(fd, json.dumps(sys.argv[1:]).encode())
os.close(fd)
sys.exit(int(os.environ.get("EXIT_STATUS", "0")))
"""


def parse(argv: list[str]):
    """The parsed arguments of ``python3 ARGV``, by the program's own parser."""
    program, rest = (argv[1], argv[2:]) if argv[0] == "-m" else (argv[0], argv[1:])
    if program == "torch.distributed.run":  # the launcher's own flags, then the program it starts
        return parse(rest[rest.index("-m"):])
    if program == "precision_oat.main":
        from precision_oat.presets import parse_args

        return parse_args(rest)
    if program == "precision_oat.lab":
        from precision_oat.lab.lab import LabArgs

        return tyro.cli(LabArgs, args=rest)
    if program == "precision_oat.lab.preflight":
        from precision_oat.lab.preflight.__main__ import PreflightArgs

        return tyro.cli(PreflightArgs, args=rest)
    if program == "benchmarks/step_time.py":
        return tyro.cli(load_script(program).BenchArgs, args=rest)
    if program == "benchmarks/scale_ladder.py":
        return tyro.cli(load_script(program).LadderArgs, args=rest)
    if program in ("benchmarks/weight_sync.py", "benchmarks/sampler_host.py"):
        from precision_oat.presets import parse_args

        split = rest.index("--")
        return load_script(program).command_line().parse_args(rest[:split]), parse_args(rest[split + 1:])
    if program.endswith("experiments/h200/shape_folder.py"):
        shape, _tokenizer_folder, _output = rest
        assert shape in load_script("benchmarks/scale_ladder.py").SHAPES, shape
        return rest
    raise AssertionError(f"no parser for python3 {' '.join(argv)}")


def recorded_calls(script: str, expected: int, tmp_path, **env) -> list[list[str]]:
    """The python3 command lines ``script`` runs (waiting for the ones it starts in the background)."""
    shims, calls = tmp_path / "bin", tmp_path / "calls"
    shims.mkdir()
    calls.mkdir()
    (shims / "python3").write_text(RECORDER.format(python=sys.executable))
    (shims / "sleep").write_text("#!/bin/sh\n")
    for shim in shims.iterdir():
        shim.chmod(0o755)
    run = subprocess.run(["bash", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "CALLS": str(calls),
                              "HF": str(tmp_path / "smolhf"), "RUNS": str(tmp_path / "runs"), **env})
    assert run.returncode == 0, run.stderr
    deadline = time.time() + 20
    while len(list(calls.iterdir())) < expected and time.time() < deadline:
        time.sleep(0.1)
    return [json.loads(f.read_text()) for f in sorted(calls.iterdir(), key=lambda f: f.stat().st_mtime_ns)]


def header_settings(script: str) -> list[dict[str, str]]:
    """The ``ARMS=… STEPS=… EXTRA=…`` settings the script's header comments give, continuation lines joined."""
    comments = [line[1:].strip() for line in (REPO / script).read_text().splitlines() if line.startswith("#")]
    joined = " ".join(comments).replace("\\ ", "")
    return [dict(word.split("=", 1) for word in shlex.split(match))
            for match in re.findall(r"ARMS=.*?EXTRA=\"[^\"]*\"", joined)]


ARMS_HEADER = header_settings("experiments/h200/arms.sh")


@pytest.mark.parametrize("script, expected, env", [
    ("experiments/h200/alone.sh", 5, {}),
    ("experiments/h200/arms.sh", 5, {}),
    *[("experiments/h200/arms.sh", len(env["ARMS"].split(";")), env) for env in ARMS_HEADER],
    ("experiments/h200/scale.sh", 14, {"DEADLINE": "9999999999"}),
    ("experiments/h200/alone.sh", 3, {"PARTS": "atlas-math atlas-counting atlas-invariant"}),
    ("experiments/h200/launcher.sh", 2, {}),
])
def test_every_command_of_the_script_parses(script, expected, env, tmp_path, monkeypatch):
    # The scripts run on a CUDA machine, where the flags that need one (FP8, batch-invariant kernels) are taken.
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    (tmp_path / "smolhf").mkdir()
    calls = recorded_calls(script, expected, tmp_path, **env)
    assert len(calls) == expected
    for argv in calls:
        parse(argv)


@pytest.mark.parametrize("env, shape, tokens", [({}, "qwen2.5-1.5b", 8192),
                                               ({"SHAPE": "qwen2.5-3b", "TOKENS": "4096"}, "qwen2.5-3b", 4096)])
def test_a_shape_run_builds_its_model_then_runs_the_command_on_it(tmp_path, env, shape, tokens):
    # The folder the stand-in for shape_folder.py would fill; without its config.json the script builds the model.
    (tmp_path / "runs" / "model").mkdir(parents=True)
    build, run = recorded_calls("experiments/h200/train_shape.sh", 2, tmp_path, **env)
    assert parse(build) == [shape, str(tmp_path / "smolhf"), str(tmp_path / "runs" / "model")]
    args = parse(run)
    assert (args.model.model, args.rollout.max_new_tokens, args.precision.dtype) == (
        str(tmp_path / "runs" / "model"), tokens, "fp16")
    assert "wall_s" in (tmp_path / "runs" / "wall.txt").read_text()


def test_two_gpus_runs_each_command_on_one_gpu_and_on_two_under_torchrun_alike(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    (tmp_path / "smolhf").mkdir()
    (tmp_path / "runs" / "shape").mkdir(parents=True)  # the stand-in for shape_folder.py writes no config.json
    calls = recorded_calls("experiments/h200/two_gpus.sh", 13, tmp_path)
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    by_run = {argv[argv.index("--output-dir") + 1].rsplit("/", 1)[-1]: argv for argv in calls if "--output-dir" in argv}
    agree = [f"{z}-{d}" for z in (1, 3) for d in ("fp16", "bf16")] + ["1-fp16-invariant"]
    assert sorted(by_run) == sorted(["kill", "scaling-one", "scaling-two"] + [f"{n}-{r}" for n in ("one", "two")
                                                                              for r in agree])
    for one, two in [(f"one-{r}", f"two-{r}") for r in agree] + [("scaling-one", "scaling-two")]:
        assert by_run[two][:5] == launcher and by_run[one][:2] == ["-m", "precision_oat.main"]
        drop_output = lambda argv: argv[:argv.index("--output-dir")] + argv[argv.index("--output-dir") + 2:]
        assert drop_output(by_run[two][5:]) == drop_output(by_run[one])
        args = parse(by_run[one])
        assert (args.rollout.prompts_per_step * args.rollout.num_samples, args.precision.dtype) == (
            (64, "fp16") if one.startswith("scaling") else (32, one.split("-")[2]))
        assert (args.train.zero_stage, args.precision.batch_invariant) == (
            (1, False) if one.startswith("scaling") else (int(one.split("-")[1]), one.endswith("invariant")))
    assert parse(by_run["scaling-one"]).rollout.max_new_tokens == 4096
    assert by_run["kill"][:5] == launcher and parse(by_run["kill"]).log.save_every == 2
    # The stand-in run ends at once, before any checkpoint: nothing is killed and the part says so.
    assert "nothing killed" in (tmp_path / "runs" / "kill.txt").read_text()


def test_two_gpus_runs_only_the_sides_named(tmp_path):
    (tmp_path / "runs" / "shape").mkdir(parents=True)
    (tmp_path / "runs" / "shape" / "config.json").write_text("{}")
    calls = recorded_calls("experiments/h200/two_gpus.sh", 1, tmp_path, PARTS="scaling", SIDES="one",
                           SCALING_PROMPTS="32")
    assert [argv[argv.index("--output-dir") + 1].rsplit("/", 1)[-1] for argv in calls] == ["scaling32-one"]
    assert parse(calls[0]).rollout.prompts_per_step == 32
    (tmp_path / "again").mkdir()
    calls = recorded_calls("experiments/h200/two_gpus.sh", 2, tmp_path / "again", PARTS="agree", SIDES="two",
                           AGREE="3-fp16 3-bf16")
    assert sorted(argv[argv.index("--output-dir") + 1].rsplit("/", 1)[-1] for argv in calls) == ["two-3-bf16",
                                                                                                 "two-3-fp16"]


LAUNCHER = """#!/usr/bin/env bash
# A stand-in for torchrun: two ranks, whose checkpoint appears after a second; rank 0 ends once rank 1 is gone.
echo "$@" >> "$CALLS/all"
out=""; prev=""; for a in "$@"; do [ "$prev" = --output-dir ] && out=$a; prev=$a; done
case " $* " in *" --resume "*) exit 0 ;; esac
mkdir -p "$out/checkpoints"
RANK=0 /bin/bash -c 'while /bin/sleep 0.1; do :; done' rank "$out" & zero=$!
RANK=1 /bin/bash -c 'while /bin/sleep 0.1; do :; done' rank "$out" & one=$!
/bin/sleep 1
echo step_2 > "$out/checkpoints/latest"
while kill -0 $one 2> /dev/null; do /bin/sleep 0.1; done
echo "SIGTERM: stopping after this step (again to stop now)"
echo "error: rank 1 stopped"
kill $zero
exit 1
"""


def test_two_gpus_kills_rank_1_once_a_checkpoint_exists_then_resumes_four_steps_past_it(tmp_path):
    shims, calls = tmp_path / "bin", tmp_path / "calls"
    shims.mkdir()
    calls.mkdir()
    (shims / "python3").write_text(LAUNCHER)
    (shims / "python3").chmod(0o755)
    run = subprocess.run(["bash", "experiments/h200/two_gpus.sh"], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "CALLS": str(calls),
                              "HF": str(tmp_path), "RUNS": str(tmp_path / "runs"), "PARTS": "kill"})
    assert run.returncode == 0, run.stderr
    report = (tmp_path / "runs" / "kill.txt").read_text().splitlines()
    assert re.fullmatch(r"rank 1 \(pid \d+\) killed after step_2; rank 0 ended \d+ s later, the launcher \d+ s later "
                        r"with exit status 1", report[0]), report
    assert report[1:] == ["SIGTERM: stopping after this step (again to stop now)", "error: rank 1 stopped"]
    started, resumed = (calls / "all").read_text().splitlines()
    assert resumed == f"{started.replace(' --steps 1000', '')} --resume --steps 6"


def test_alone_runs_only_the_parts_named(tmp_path):
    (tmp_path / "smolhf").mkdir()
    calls = recorded_calls("experiments/h200/alone.sh", 2, tmp_path, PARTS="speed preflight")
    assert [argv[:2] for argv in calls] == [["benchmarks/step_time.py", "--model"],
                                             ["-m", "precision_oat.lab.preflight"]]
    phases = (tmp_path / "runs" / "phases.log").read_text()
    assert "lab-pair" not in phases and "seeds" not in phases


def test_alone_logs_each_parts_exit_status(tmp_path):
    (tmp_path / "smolhf").mkdir()
    recorded_calls("experiments/h200/alone.sh", 1, tmp_path, PARTS="preflight", EXIT_STATUS="3")
    assert "preflight exit 3" in (tmp_path / "runs" / "phases.log").read_text()


def test_the_vllm_engines_that_share_a_process_in_alone_never_sleep(tmp_path):
    # The benchmark and the lab start an engine per dtype in one process; vLLM's sleep-mode allocator takes one.
    (tmp_path / "smolhf").mkdir()
    step_time = load_script("benchmarks/step_time.py")
    engines = 0
    for argv in recorded_calls("experiments/h200/alone.sh", 5, tmp_path):
        args = parse(argv)
        if argv[0] == "benchmarks/step_time.py":
            settings = [step_time.sampler_settings(args, kind) for kind in args.samplers if kind != "builtin"]
        elif argv[1] == "precision_oat.lab" and args.sampler == "vllm":
            settings = [args.rollout_args(longest_prompt=64)]
        else:
            continue
        engines += len(settings) * len(args.dtypes)
        assert not any(s.vllm_sleep for s in settings), argv
    assert engines == 2 + 2 + 3


def test_arms_runs_then_once_every_arm_has_ended(tmp_path):
    (tmp_path / "smolhf").mkdir()
    runs = tmp_path / "runs"
    # Each stand-in arm runs 2 s and records its command line as it ends; THEN counts the records it finds (moved into
    # place whole: the shell creates a redirect's file before it writes the count).
    recorded_calls("experiments/h200/arms.sh", 2, tmp_path, ARMS="a pg fp16 0;b pg bf16 0", SECONDS_EACH="2",
                   THEN='ls "$CALLS" | wc -l > "$RUNS/count" && mv "$RUNS/count" "$RUNS/then-saw"')
    deadline = time.time() + 20
    while not (runs / "then-saw").exists() and time.time() < deadline:
        time.sleep(0.1)
    assert (runs / "then-saw").read_text().strip() == "2"


def watched_report(runs, watch: int, tmp_path) -> tuple[float, set[str]]:
    """report.sh with WATCH=``watch`` on ``runs``: its seconds, and the names in the tar it leaves."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    started = time.monotonic()
    run = subprocess.run(["bash", "experiments/h200/report.sh"], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "RUNS": str(runs), "OUT": str(out), "WATCH": str(watch)})
    assert run.returncode == 0, run.stderr
    listed = subprocess.run(["tar", "tzf", str(out / "results.tgz")], capture_output=True, text=True, check=True)
    return time.monotonic() - started, {name.strip("./") for name in listed.stdout.split()}


def console(runs, name: str, *lines: str) -> None:
    runs.mkdir(exist_ok=True)
    (runs / f"{name}.log").write_text("".join(f"{line}\n" for line in lines))


def test_a_watching_report_returns_once_every_stepping_run_is_done(tmp_path):
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        console(runs, name, "step    1/2  reward 0.1", "step    2/2  reward 0.2", "done: 2 steps in 3s")
    console(runs, "then", "a part that logs no steps")
    seconds, packed = watched_report(runs, 300, tmp_path)
    assert seconds < 20
    assert {"a.log", "b.log", "then.log"} <= packed


def test_a_watching_report_packs_the_results_while_a_run_still_steps_and_returns_at_its_limit(tmp_path):
    runs = tmp_path / "runs"
    console(runs, "a", "step    1/2  reward 0.1", "step    2/2  reward 0.2", "done: 2 steps in 3s")
    console(runs, "b", "step    1/9  reward 0.1")
    seconds, packed = watched_report(runs, 3, tmp_path)
    assert 3 <= seconds < 20
    assert {"a.log", "b.log"} <= packed


def test_a_report_without_out_leaves_its_tar_in_the_results_folder(tmp_path):
    runs = tmp_path / "runs"
    console(runs, "a", "step    1/1  reward 0.1", "done: 1 steps in 1s")
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    run = subprocess.run(["bash", "experiments/h200/report.sh"], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**env, "RUNS": str(runs)})
    assert run.returncode == 0, run.stderr
    listed = subprocess.run(["tar", "tzf", str(runs / "results.tgz")], capture_output=True, text=True, check=True)
    assert "./a.log" in listed.stdout.split()


@pytest.mark.parametrize("name, arms", [
    ("long-pair", {"pg-fp16-long": ("fp16", "same", "same"), "pg-bf16-long": ("bf16", "same", "same")}),
    ("atlas-head-fp8", {"pg-bf16-fp32head-long": ("bf16", "same", "fp32"), "grpo-tis-bf16-fp8-long": ("bf16", "fp8", "same")}),
    ("atlas-masks", {"grpo-icepop-bf16-fp8-long": ("bf16", "fp8", "same"),
                     "grpo-geo-mask-bf16-fp8-long": ("bf16", "fp8", "same")}),
    ("gspo", {"gspo-fp16-long": ("fp16", "same", "same"), "gspo-bf16-long": ("bf16", "same", "same")}),
])
def test_a_named_set_runs_its_arms_at_the_long_setting_under_names_the_report_reads(name, arms, tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    (tmp_path / "smolhf").mkdir()
    calls = recorded_calls("experiments/h200/arms.sh", 2, tmp_path, SET=name, EXTRA="--learning-rate 3e-5")
    found = {}
    for argv in calls:
        arm, args = argv[argv.index("--output-dir") + 1].rsplit("/", 1)[-1], parse(argv)
        assert NAME.fullmatch(arm)["algo"] == args.algorithm.algo
        assert (args.rollout.max_new_tokens, args.train.learning_rate) == (1280, 3e-5)  # EXTRA over the setting
        assert args.train.steps == 150 and args.log.probe_dtypes == ()  # no probe after the last step
        found[arm] = (args.precision.dtype, args.precision.sampler_dtype or "same", args.precision.lm_head_dtype)
    assert found == arms


def test_a_named_set_runs_at_the_seed_asked_under_names_that_group_its_seeds(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    (tmp_path / "smolhf").mkdir()
    calls = recorded_calls("experiments/h200/arms.sh", 2, tmp_path, SET="grpo-tis", SEED="1")
    from precision_oat.compare.loading import config_from_name

    found = {argv[argv.index("--output-dir") + 1].rsplit("/", 1)[-1]: parse(argv).train.seed for argv in calls}
    assert found == {"grpo-tis-fp16-long-s1": 1, "grpo-tis-bf16-long-s1": 1}
    # The seed-1 arm and the seed-0 one ("grpo-tis-bf16-long") name one experiment.
    assert config_from_name("grpo-tis-bf16-long-s1") == {**config_from_name("grpo-tis-bf16-long"), "seed": 1}


def test_an_unknown_set_is_named_with_the_known_ones(tmp_path):
    run = subprocess.run(["bash", "experiments/h200/arms.sh"], cwd=REPO, capture_output=True, text=True, timeout=30,
                         env={**os.environ, "HF": str(tmp_path), "RUNS": str(tmp_path / "runs"), "SET": "fp4"})
    assert run.returncode == 2
    assert run.stderr.strip() == ("SET=fp4: unknown set; the sets are long, long-pair, atlas-head-fp8, atlas-masks, "
                                  "grpo, grpo-tis, gspo")


@pytest.mark.parametrize("mib, started", [(81559, False), (143771, True)])  # an H100's 80 GB, an H200's 141 GB
def test_three_long_arms_start_only_on_a_gpu_that_holds_them(mib, started, tmp_path):
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, body in (("nvidia-smi", f"echo {mib}"), ("python3", 'touch "$RUNS/started"'), ("sleep", "")):
        (shims / name).write_text(f"#!/bin/sh\n{body}\n")
        (shims / name).chmod(0o755)
    arms = "grpo-fp16-long grpo fp16 0;grpo-bf16-long grpo bf16 0;gspo-bf16-long gspo bf16 0"
    run = subprocess.run(["bash", "experiments/h200/arms.sh"], cwd=REPO, capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "HF": str(tmp_path),
                              "RUNS": str(tmp_path / "runs"), "SET": "long", "ARMS": arms})
    if started:
        assert run.returncode == 0, run.stderr
    else:
        assert run.returncode == 2
        assert run.stderr.strip() == ("arms.sh: 3 arms at the long setting need ~90 GiB and this GPU has 79; "
                                      "run 2 at a time (ARMS)")
    deadline = time.time() + 10
    while started and not (tmp_path / "runs" / "started").exists() and time.time() < deadline:
        time.sleep(0.1)
    assert (tmp_path / "runs" / "started").exists() == started


def test_the_long_set_runs_the_arms_given_at_the_long_setting(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    (tmp_path / "smolhf").mkdir()
    arms = "grpo-fp16-long grpo fp16 0;grpo-bf16-long grpo bf16 0;gspo-bf16-long gspo bf16 0"
    calls = recorded_calls("experiments/h200/arms.sh", 3, tmp_path, SET="long", ARMS=arms)
    found = {argv[argv.index("--output-dir") + 1].rsplit("/", 1)[-1]: parse(argv) for argv in calls}
    assert sorted(found) == ["grpo-bf16-long", "grpo-fp16-long", "gspo-bf16-long"]
    for args in found.values():
        assert (args.rollout.max_new_tokens, args.train.learning_rate, args.train.steps) == (1280, 5e-5, 150)


def test_the_long_set_without_arms_says_to_give_them(tmp_path):
    run = subprocess.run(["bash", "experiments/h200/arms.sh"], cwd=REPO, capture_output=True, text=True, timeout=30,
                         env={**os.environ, "HF": str(tmp_path), "RUNS": str(tmp_path / "runs"), "SET": "long"})
    assert run.returncode == 2
    assert run.stderr.strip() == "SET=long runs the arms of ARMS at the long setting; set ARMS too"


def test_an_arms_own_flags_come_after_extra(tmp_path):
    (tmp_path / "smolhf").mkdir()
    calls = recorded_calls("experiments/h200/arms.sh", 2, tmp_path, ARMS="a pg bf16 0 --lm-head-dtype fp32;b pg bf16 0",
                           EXTRA="--lm-head-dtype same")
    head = {argv[argv.index("--output-dir") + 1].rsplit("/", 1)[-1]: parse(argv).precision.lm_head_dtype for argv in calls}
    assert head == {"a": "fp32", "b": "same"}


def test_a_stale_flag_fails_the_check(tmp_path):
    with pytest.raises(SystemExit):
        parse(["-m", "precision_oat.main", "--vllm-cpu-kv-cache-gb", "2"])


def test_two_gpus_report_reads_real_runs_of_one_and_two_processes(tmp_path, embedded_policy_dir, capsys):
    from tests.backends.test_data_parallel import COMMON, launch

    runs = tmp_path / "runs"
    flags = ["--model", str(embedded_policy_dir), *COMMON, "--steps", "3"]
    for name, processes in (("one-1-fp32", 1), ("two-1-fp32", 2)):
        done = launch(*flags, "--output-dir", str(runs / name), processes=processes)
        assert done.returncode == 0, done.stdout + done.stderr
    for one_or_two in ("one", "two"):  # the same runs stand for the scaling part's, and for a batch-invariant pair
        shutil.copytree(runs / f"{one_or_two}-1-fp32", runs / f"scaling-{one_or_two}")
        shutil.copytree(runs / f"{one_or_two}-1-fp32", runs / f"{one_or_two}-1-fp32-invariant")

    assert load_script("experiments/h200/two_gpus_report.py").main([str(runs)]) == 0
    out = capsys.readouterr().out
    agree, kill, scaling = out.split("## ")[1:]
    [row] = [line for line in agree.splitlines() if line.startswith("| 1 | fp32 |")]
    [invariant] = [line for line in agree.splitlines() if line.startswith("| 1 | fp32, batch-invariant |")]
    assert invariant.split("|")[3:] == row.split("|")[3:]
    cells = [c.strip() for c in row.strip("|").split("|")]
    equal, _, compared = cells[3].split()
    # On CPU two processes sample and score what one does: the same answers at every step, step 1 equal in most figures
    # (the gradient's sums are taken in another order) and within fp32 rounding in all; gloo, so no NCCL transport.
    assert cells[2] == "3 / 3" and cells[5] == "–" and cells[8] == "–"
    assert int(compared) // 2 < int(equal) <= int(compared)
    assert cells[4] == "0" or float(cells[4].split()[0]) < 1e-4
    assert kill.strip() == "kill\n\n(not run)"
    assert re.search(r"^efficiency: \d+\.\d\d \(one-GPU step", scaling, re.M)
    assert [line.split("|")[1].strip() for line in scaling.splitlines() if re.match(r"\| \d", line)] == ["1", "2"]
    [efficiency] = [line for line in scaling.splitlines() if line.startswith("| efficiency |")]
    assert efficiency.split("|")[2].strip() == re.search(r"^efficiency: (\S+)", scaling, re.M)[1]
    # A side that has not run yet leaves the other's row and no efficiency.
    shutil.rmtree(runs / "scaling-two")
    assert load_script("experiments/h200/two_gpus_report.py").main([str(runs)]) == 0
    scaling = capsys.readouterr().out.split("## scaling")[1]
    assert [line.split("|")[1].strip() for line in scaling.splitlines() if re.match(r"\| \d", line)] == ["1"]
    assert "efficiency: – (scaling-two has not run)" in scaling
    # Another number of prompts a step (SCALING_PROMPTS=32) has a table of its own, beside the default's.
    shutil.copytree(runs / "one-1-fp32", runs / "scaling32-one")
    assert load_script("experiments/h200/two_gpus_report.py").main([str(runs)]) == 0
    default, at_32 = capsys.readouterr().out.split("## scaling")[1:]
    assert at_32.startswith(" at 32 prompts a step") and "efficiency: – (scaling32-two has not run)" in at_32
    assert "(scaling-two has not run)" in default


def test_two_gpus_report_names_each_transport_nccl_set_up_once(tmp_path):
    log = tmp_path / "two-1-fp16.log"
    log.write_text("node:71:90 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
                   "node:72:91 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
                   "node:71:90 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
                   "step    1/20  reward 0.041\n")
    assert load_script("experiments/h200/two_gpus_report.py").transports(log) == "P2P/CUMEM/read, SHM/direct/direct"
