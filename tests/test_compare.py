"""``python -m precision_oat.compare`` on three real runs: the table's and the CSV's figures are those of the runs'
metrics.jsonl, worked out here from the rows; the seeds of one experiment share a row and a curve; the figures are
PNGs; a folder that is not a run fails in one line.

The runs (``python -m precision_oat.main`` on the embedded policy, 4 prompts × 2 samples): IS-PG fp16 with seeds
0 and 1 for 4 steps, GRPO bf16 seed 0 for 3 steps, each evaluated every 2 steps. The shortest run has 3 steps, so
every reward window is 3 steps long and the header says so.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from statistics import mean

import pytest
import tyro

from precision_oat.compare import compare
from precision_oat.compare.__main__ import CompareArgs
from precision_oat.compare.figures import curve, tails
from precision_oat.compare.stats import run_stats
from tests.test_args import _check_help, _render_help, parse_help

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore",
       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
TINY = ("--prompts-per-step", "4", "--num-samples", "2", "--probe-dtypes", "--eval-every", "2",
        "--wandb-mode", "disabled")
RUNS = {"pg-fp16-s0": ("--algo", "pg", "--dtype", "fp16", "--seed", "0", "--steps", "4"),
        "pg-fp16-s1": ("--algo", "pg", "--dtype", "fp16", "--seed", "1", "--steps", "4"),
        "grpo-bf16-s0": ("--algo", "grpo", "--dtype", "bf16", "--seed", "0", "--steps", "3")}
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def root(embedded_policy_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("runs")
    procs = [subprocess.Popen([sys.executable, "-m", "precision_oat.main", "--model", str(embedded_policy_dir),
                               "--output-dir", str(folder / name), *TINY, *flags], cwd=folder, env=ENV, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for name, flags in RUNS.items()]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
    return folder


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def by_hand(folder: Path, width: int = 3) -> dict:
    """The comparison's figures of one run, straight from its rows."""
    train = rows(folder)
    reward = [r["reward/mean"] for r in train]
    windows = [mean(reward[i:i + width]) for i in range(len(reward) - width + 1)]  # steps 1–3, 2–4, …
    evals = [r for r in train if "eval/average/reward" in r]
    return {
        "steps": len(train),
        "reward_first": mean(reward[:width]),
        "reward_last": mean(reward[-width:]),
        "reward_best": max(windows),
        "reward_best_from": windows.index(max(windows)) + 1,
        "held_out_step": evals[-1]["step"],
        "held_out_reward": evals[-1]["eval/average/reward"],
        "abs_logp_diff": mean(r["mismatch/abs_logp_diff_mean"] for r in train),
        "k3": mean(r["mismatch/k3"] for r in train),
        "seq_kl": mean(r["mismatch/seq_kl"] for r in train),
        "skipped_steps": train[-1]["train/skipped_steps"],
        # The first step's set-up is left out: (elapsed at the last step − at the first) / (steps − 1).
        "s_per_step": (train[-1]["time/elapsed_s"] - train[0]["time/elapsed_s"]) / (len(train) - 1),
    }


def cells(line: str) -> list[str]:
    """A markdown row's cells: "| a | b |" → ["a", "b"]."""
    return [c.strip() for c in line.strip().removeprefix("|").removesuffix("|").split(" | ")]


def numbers(cell: str) -> list[float]:
    """A cell's mean, then its range when it shows one: "0.125 (0.100–0.150)" → [0.125, 0.1, 0.15]."""
    return [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]\d+)?", cell)]


def test_the_runs_evaluate_and_the_shortest_sets_the_window(root):
    # Evaluations at steps 2 and 4 (every 2 steps) and at the last step 3 of the GRPO run.
    assert by_hand(root / "pg-fp16-s0")["held_out_step"] == 4
    assert by_hand(root / "grpo-bf16-s0")["held_out_step"] == 3
    lines: list[str] = []
    compare([root], plots=False, log=lines.append)
    header = cells(lines[0].splitlines()[0])
    assert header[6] == "reward, first 3-step mean (the shortest run has 3 steps, fewer than 10)"
    assert header[7:9] == ["reward, last 3-step mean", "reward, best 3-step mean"]
    # A window the runs can hold needs no note.
    lines.clear()
    compare([root], window=2, plots=False, log=lines.append)
    assert cells(lines[0].splitlines()[0])[6:9] == [
        "reward, first 2-step mean", "reward, last 2-step mean", "reward, best 2-step mean"]


def test_the_csv_holds_each_runs_figures_computed_from_its_metrics(root, tmp_path):
    compare([root / name for name in RUNS], plots=False, csv_file=tmp_path / "runs.csv", log=lambda _: None)
    shown = {row["run"]: row for row in csv.DictReader((tmp_path / "runs.csv").open())}
    assert set(shown) == set(RUNS)
    for name in RUNS:
        row, expected = shown[name], by_hand(root / name)
        assert (row["group"], row["seed"], row["window"]) == (
            {"pg-fp16-s0": "pg fp16", "pg-fp16-s1": "pg fp16", "grpo-bf16-s0": "grpo bf16"}[name], name[-1], "3")
        assert (row["dtype"], row["algorithm"], row["correction"]) == (name.split("-")[1], name.split("-")[0], "none")
        for key, value in expected.items():
            assert float(row[key]) == pytest.approx(value, rel=1e-12, abs=1e-15), (name, key)


def test_the_table_gives_each_experiment_one_row_its_seeds_mean_and_range(root):
    lines: list[str] = []
    groups = compare([root], plots=False, log=lines.append)
    assert [(g.label, [r.name for r in g.runs]) for g in groups] == [
        ("grpo bf16", ["grpo-bf16-s0"]), ("pg fp16", ["pg-fp16-s0", "pg-fp16-s1"])]
    [table_text] = lines
    table = {cells(line)[0]: cells(line) for line in table_text.splitlines()[2:]}
    grpo, pg = table["grpo bf16"], table["pg fp16"]
    assert pg[1:6] == ["fp16", "pg", "none", "0, 1", "4"] and grpo[1:6] == ["bf16", "grpo", "none", "0", "3"]
    seeds = [by_hand(root / "pg-fp16-s0"), by_hand(root / "pg-fp16-s1")]
    one = by_hand(root / "grpo-bf16-s0")
    columns = ["reward_first", "reward_last", "reward_best", "held_out_reward", "abs_logp_diff", "k3", "seq_kl",
               "skipped_steps", "s_per_step"]
    # Each cell is printed to 3 decimals (rewards), 3 significant digits (the rest); half a unit of the last.
    tolerance = {"reward_first": 5e-4, "reward_last": 5e-4, "reward_best": 5e-4, "held_out_reward": 5e-4,
                 "skipped_steps": 0.5}
    for key, cell in zip(columns, pg[6:]):
        values = [s[key] for s in seeds]
        expected = [mean(values)] + ([min(values), max(values)] if len(numbers(cell)) == 3 else [])
        assert numbers(cell) == pytest.approx(expected, rel=5e-3, abs=tolerance.get(key, 0)), (key, cell)
    for key, cell in zip(columns, grpo[6:]):
        assert numbers(cell) == pytest.approx([one[key]], rel=5e-3, abs=tolerance.get(key, 0)), (key, cell)
    # The two seeds sampled differently, so their mismatch differs and the cell shows its range.
    assert len(numbers(pg[10])) == 3


def test_the_figures_are_pngs_of_each_groups_mean_curve(root, tmp_path):
    lines: list[str] = []
    groups = compare([root], figures=tmp_path / "cmp", log=lines.append)
    written = [tmp_path / "cmp_reward.png", tmp_path / "cmp_mismatch.png"]
    assert lines[-2:] == [f"wrote {p}" for p in written]
    for path in written:
        data = path.read_bytes()
        width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk opens every PNG
        assert data[:8] == PNG and data[12:16] == b"IHDR" and width > 400 and height > 300
    # The pg fp16 curve: at each step the seeds' mean of their trailing 3-step mean reward.
    [pg] = [g for g in groups if g.label == "pg fp16"]
    per_seed = [[r["reward/mean"] for r in rows(root / name)] for name in ("pg-fp16-s0", "pg-fp16-s1")]
    trailing = [[mean(rewards[max(0, i - 2): i + 1]) for i in range(4)] for rewards in per_seed]
    steps, average, low, high = curve(pg, "reward/mean", 3)
    assert steps == [1, 2, 3, 4]
    assert average == pytest.approx([mean(pair) for pair in zip(*trailing)], abs=1e-12)
    assert (low, high) == (pytest.approx([min(p) for p in zip(*trailing)], abs=1e-12),
                           pytest.approx([max(p) for p in zip(*trailing)], abs=1e-12))


def test_a_seed_that_ran_longer_goes_on_alone_past_the_groups_curve(root, tmp_path):
    shutil.copytree(root, tmp_path / "runs")
    cut = tmp_path / "runs" / "pg-fp16-s1" / "metrics.jsonl"
    cut.write_text("".join(line + "\n" for line in cut.read_text().splitlines()[:2]))  # seed 1 stops at step 2
    groups = compare([tmp_path / "runs"], figures=tmp_path / "cmp", log=lambda line: None)
    [pg] = [g for g in groups if g.label == "pg fp16"]
    assert curve(pg, "reward/mean", 3)[0] == [1, 2]
    rewards = [r["reward/mean"] for r in rows(root / "pg-fp16-s0")]
    [(steps, values)] = tails(pg, "reward/mean", 3)  # seed 0 alone, from the curve's last step to its own
    assert steps == [2, 3, 4]
    assert values == pytest.approx([mean(rewards[max(0, i - 2): i + 1]) for i in (1, 2, 3)], abs=1e-12)
    # Seeds that end together leave nothing past the curve, and a lone seed's curve is all of it.
    whole = {g.label: g for g in compare([root], plots=False, log=lambda line: None)}
    assert tails(whole["pg fp16"], "reward/mean", 3) == [] and tails(whole["grpo bf16"], "reward/mean", 3) == []


def test_a_title_wider_than_the_figure_widens_the_image_rather_than_being_cut(root, tmp_path):
    def widths(title: str, prefix: str) -> list[int]:
        compare([root], figures=tmp_path / prefix, title=title, log=lambda line: None)
        return [struct.unpack(">II", (tmp_path / f"{prefix}_{kind}.png").read_bytes()[16:24])[0]
                for kind in ("reward", "mismatch")]

    short, long = widths("runs", "short"), widths("a title far longer than any figure is wide " * 4, "long")
    assert all(wide > narrow for wide, narrow in zip(long, short)), (short, long)


def test_the_command_prints_the_table_and_writes_it_as_markdown(root, tmp_path):
    done = subprocess.run([sys.executable, "-m", "precision_oat.compare", str(root), "--no-plots", "--markdown",
                           str(tmp_path / "table.md")], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "table.md").read_text()
    assert done.stdout == f"{table}wrote {tmp_path / 'table.md'}\n"
    assert len(table.splitlines()) == 4 and not list(tmp_path.glob("*.png"))


def test_a_run_still_writing_is_compared_on_its_complete_rows(root, tmp_path):
    running = tmp_path / "running"
    running.mkdir()
    (running / "config.json").write_text((root / "pg-fp16-s0" / "config.json").read_text())
    (running / "metrics.jsonl").write_text((root / "pg-fp16-s0" / "metrics.jsonl").read_text() + '{"step": 5, "rew')
    compare([running], plots=False, csv_file=tmp_path / "runs.csv", log=lambda _: None)
    [row] = csv.DictReader((tmp_path / "runs.csv").open())
    # Alone, its 4 steps are the window.
    assert (row["steps"], row["window"]) == ("4", "4")
    assert float(row["reward_last"]) == pytest.approx(by_hand(root / "pg-fp16-s0", width=4)["reward_last"],
                                                      rel=1e-12, abs=1e-15)


def test_a_run_whose_mismatch_was_not_finite_is_compared(tmp_path, capsys):
    # metrics.jsonl holds a non-finite float as a string ("nan", "inf"); the table shows it as such.
    rows = [{"step": 1, "time/elapsed_s": 1.0, "reward/mean": 0.25, "mismatch/abs_logp_diff_mean": 0.01},
            {"step": 2, "time/elapsed_s": 2.0, "reward/mean": 0.75, "mismatch/abs_logp_diff_mean": "nan"}]
    (tmp_path / "pg-fp16-s0.metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    [group] = compare([tmp_path], plots=False, log=lambda line: None)
    assert math.isnan(run_stats(group.runs[0], 2)["abs_logp_diff"])
    assert run_stats(group.runs[0], 2)["reward_last"] == 0.5


def test_a_metrics_file_without_the_time_is_compared_with_no_step_time(tmp_path):
    # A NAME.metrics.jsonl written by another tool may hold only the step and the reward: the table leaves s/step out.
    rows = [{"step": 1, "reward/mean": 0.25}, {"step": 2, "reward/mean": 0.75}]
    (tmp_path / "grpo-bf16-s0.metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = []
    [group] = compare([tmp_path], plots=False, log=lines.append)
    assert run_stats(group.runs[0], 2)["s_per_step"] is None
    [row] = [cells(line) for line in lines[0].splitlines() if line.startswith("| grpo bf16")]
    assert (row[0], row[-1]) == ("grpo bf16", "–")


def test_a_run_whose_name_says_nothing_is_named_by_it_once(tmp_path):
    (tmp_path / "baseline").mkdir()
    (tmp_path / "baseline" / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    [group] = compare([tmp_path / "baseline"], plots=False, log=lambda _: None)
    assert group.label == "baseline ?"


def test_a_metrics_row_without_its_step_fails_in_one_line_naming_the_file(tmp_path):
    (tmp_path / "grpo-bf16-s0.metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n{"reward/mean": 0.25}\n')
    done = subprocess.run([sys.executable, "-m", "precision_oat.compare", str(tmp_path), "--no-plots"], cwd=tmp_path,
                          env=ENV, capture_output=True, text=True)
    assert done.returncode != 0 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {tmp_path / 'grpo-bf16-s0.metrics.jsonl'}: a row has no \"step\";")


@pytest.mark.parametrize("case", ["empty folder", "missing folder", "run before its first step"])
def test_a_folder_that_is_not_a_run_fails_in_one_line_naming_it(case, tmp_path):
    folder = tmp_path / "x"
    if case != "missing folder":
        folder.mkdir()
    if case == "run before its first step":
        (folder / "config.json").write_text("{}")
        (folder / "metrics.jsonl").write_text("")
    done = subprocess.run([sys.executable, "-m", "precision_oat.compare", str(folder), "--no-plots"], cwd=tmp_path,
                          env=ENV, capture_output=True, text=True)
    assert done.returncode != 0 and done.stdout == ""
    [line] = done.stderr.splitlines()
    expected = {"empty folder": "is not a run: it holds no metrics.jsonl, nor folders that do; give a run's "
                                "--output-dir, or a folder of run folders (a sweep's --output-root)",
                "missing folder": "is not a run: it does not exist;",
                "run before its first step": "has no training step logged yet;"}[case]
    assert line.startswith(f"error: {folder} {expected}")


@pytest.mark.parametrize("flag", ["--markdown", "--csv", "--figures"])
def test_an_output_path_that_cannot_be_written_fails_in_one_line_naming_its_flag(flag, root, tmp_path):
    (tmp_path / "a file").write_text("kept")
    target = tmp_path / "a file" / "out"  # its folder would have to replace a file
    plots = [] if flag == "--figures" else ["--no-plots"]
    done = subprocess.run([sys.executable, "-m", "precision_oat.compare", str(root), flag, str(target), *plots],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert done.returncode != 0
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: {flag} {target}: cannot be created or written (")
    assert (tmp_path / "a file").read_text() == "kept"


def test_every_flag_has_its_own_help():
    text = _render_help(lambda: tyro.cli(CompareArgs, args=["--help"], prog="python -m precision_oat.compare"))
    flags = parse_help(text)
    _check_help(flags, "python -m precision_oat.compare")
    assert {"--window", "--plots", "--figures", "--markdown", "--csv"} <= {n for f in flags for n in f.names}


def test_a_metrics_file_named_on_the_command_line_is_a_run(root, tmp_path):
    # NAME.metrics.jsonl (as benchmarks/results/ stores runs) and a run folder's metrics.jsonl, each given itself.
    stored = tmp_path / "pg-fp16-s1.metrics.jsonl"
    stored.write_text((root / "pg-fp16-s1" / "metrics.jsonl").read_text())
    groups = compare([stored, root / "pg-fp16-s0" / "metrics.jsonl"], plots=False, log=lambda _: None)
    assert sorted((r.name, r.seed, len(r.train)) for g in groups for r in g.runs) == [
        ("pg-fp16-s0", 0, 4), ("pg-fp16-s1", 1, 4)]
