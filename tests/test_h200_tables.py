"""The H200 tables docs/results.md quotes (§4c arms and instruments, §4d loops) are what the scripts compute from the
committed metrics."""

from __future__ import annotations

import contextlib
import io
import json
import re
import statistics

import pytest

from tests.conftest import REPO as ROOT
from tests.conftest import load_script

RESULTS = ROOT / "benchmarks" / "results"
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def _numbers(line: str) -> list[float]:
    """The figures of the table row's cells after the first (μ buckets, shares, positions, slope, self-gap)."""
    cells = line.split("|")[2:7]
    return [float(x) for cell in cells for x in NUMBER.findall(cell)]


@pytest.mark.parametrize("dtype", ["bf16 (5)", "fp16 (4)", "fp32 (1)"])
def test_the_instruments_quoted_in_results_are_those_of_the_round5_metrics(dtype):
    instruments = load_script("experiments/h200/instruments.py")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        instruments.main([RESULTS / "h200_round5", RESULTS / "h200_round5" / "reference"])
    [computed] = [line for line in out.getvalue().splitlines() if line.startswith(f"| {dtype} |")]
    [quoted] = [line for line in (ROOT / "docs" / "results.md").read_text().splitlines()
                if line.startswith(f"| {dtype} |")]
    # The page drops the phantom column (all zero, said in words) and shows two significant digits.
    got, shown = _numbers(computed), _numbers(quoted)
    assert len(shown) == 14
    assert got == pytest.approx(shown, rel=0.06)


def _figure(cell: str) -> float:
    """A table cell's figure: "2.86", "11,814" or "6.2k"."""
    text = cell.strip().split()[0].replace(",", "")
    return float(text[:-1]) * 1000 if text.endswith("k") else float(text)


def _table_rows(text: str, start: str = "| ") -> dict[str, list[str]]:
    """The table rows of ``text`` that start with ``start``, each split at "|", by the text of its first cell."""
    return {line.split("|")[1].strip(): line.split("|") for line in text.splitlines() if line.startswith(start)}


def _summarized(folder) -> str:
    """What benchmarks/results/h200_scale/summarize.py prints for ``folder``."""
    summarize = load_script("benchmarks/results/h200_scale/summarize.py")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        summarize.main(folder)
    return out.getvalue()


def _summarized_loops(folder) -> dict[str, list[str]]:
    """The cells of each loop's row as summarize.py prints them for ``folder``."""
    return _table_rows(_summarized(folder), start="| loop-")


def test_the_loops_quoted_in_results_are_those_of_the_h200_scale_metrics():
    first, sixth = _summarized_loops(RESULTS / "h200_scale"), _summarized_loops(RESULTS / "h200_scale_6")
    page = _table_rows((ROOT / "docs" / "results.md").read_text())
    # results.md §4d: column 3 is "after, 8 × 4", column 4 "after, 128 × 8", column 5 the sixth run's; summarize.py's
    # columns 4-7 are s/step, response tokens/step, sampler tok/s and end-to-end tok/s.
    for quoted, column in (("s per step (median)", 4), ("response tokens per step", 5), ("vLLM sampler, tok/s", 6),
                           ("generated tok/s, end to end", 7)):
        for row, page_column in ((first["loop-8x4"], 3), (first["loop-128x8"], 4), (sixth["loop-128x8-1024"], 5)):
            assert _figure(page[quoted][page_column]) == pytest.approx(_figure(row[column]), rel=0.01), \
                (quoted, page_column)


def test_a_loops_profiled_step_is_left_out_of_its_summary(tmp_path):
    loop = tmp_path / "loop-2x2"
    loop.mkdir()
    (loop / "config.json").write_text(json.dumps({"prompts_per_step": 2, "num_samples": 2, "profile_update": 4}))
    parts = ("sample", "score", "update", "sync", "reward", "other")
    rows, elapsed = [], 0.0
    for step, update in ((1, 9.0), (2, 1.0), (3, 1.0), (4, 30.0)):  # step 1 warms up, step 4's update is profiled
        elapsed += 2.0 + update
        rows.append({"step": step, "time/elapsed_s": elapsed, "response/length_mean": 10.0,
                     "perf/sample_tokens_per_s": 20.0, **{f"perf/time/{p}": 0.0 for p in parts},
                     "perf/time/sample": 2.0, "perf/time/update": update})
    (loop / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    cells = _summarized_loops(tmp_path)["loop-2x2"]
    assert _figure(cells[4]) == 3.0  # s/step of steps 2 and 3
    assert cells[10].strip() == "1.00 (33%)"  # their mean update


def _section(heading: str) -> str:
    """results.md's text from ``heading`` to the next heading."""
    return (ROOT / "docs" / "results.md").read_text().split(heading, 1)[1].split("\n#", 1)[0]


def test_the_third_scale_run_quoted_in_results_is_that_of_its_files():
    section = _section("### Third run")
    rows = _table_rows(section)
    loops = _summarized_loops(RESULTS / "h200_scale_3")
    # summarize.py's columns 4 and 6 are s/step and sampler tok/s, its last the share outside sampling and updating.
    for quoted, loop in (("`--vllm-kv-cache-gb 2`", "loop-8x4"), ("the cache the utilization leaves (~40 GiB)",
                                                                     "loop-8x4-util")):
        assert _figure(rows[quoted][2]) == pytest.approx(_figure(loops[loop][4]), rel=0.01)
        assert _figure(rows[quoted][3]) == pytest.approx(_figure(loops[loop][6]), rel=0.02)
        assert rows[quoted][5].split()[0] == loops[loop][-2].strip()
    for column, name in ((2, "ladder-8k.json"), (3, "ladder-4k.json")):
        [cell] = json.loads((RESULTS / "h200_scale_3" / name).read_text())["cells"]
        assert _figure(rows["sampling, vLLM tok/s"][column]) == pytest.approx(cell["sampler_tokens_per_s"], rel=0.001)
        shown_tokens, shown_mfu = rows["learner tok/s (rescoring + update), MFU"][column].rsplit(", ", 1)
        assert _figure(shown_tokens) == pytest.approx(cell["learner_tokens_per_s"], rel=0.001)
        assert float(shown_mfu.strip().rstrip("%")) == pytest.approx(100 * cell["mfu"], abs=0.05)
        step = rows["step: sample / score / update / sync / other"][column]
        assert _figure(step.split(" s:")[0]) == pytest.approx(cell["step_time_s"], abs=0.05)


def test_the_fourth_scale_run_quoted_in_results_is_that_of_its_files():
    section = _section("### Fourth run")
    rows = _table_rows(section)
    loops = _summarized_loops(RESULTS / "h200_scale_4")
    for quoted, loop in (("a seed per row, π_old rescored", "loop-128x8-tuned"),
                         ("`--no-vllm-row-seeds --no-rescore`", "loop-128x8-fast")):
        for column, summarized in ((2, 4), (3, 6), (4, 7)):  # s/step, sampler tok/s, end-to-end tok/s
            assert _figure(rows[quoted][column]) == pytest.approx(_figure(loops[loop][summarized]), rel=0.01)
        assert rows[quoted][6].strip() == loops[loop][-2].strip()
    [cell] = json.loads((RESULTS / "h200_scale_4" / "ladder-4k-no-ckpt.json").read_text())["cells"]
    shown_tokens, shown_mfu = rows["no checkpointing"][4].rsplit(", ", 1)
    assert _figure(shown_tokens) == pytest.approx(cell["learner_tokens_per_s"], rel=0.001)
    assert float(shown_mfu.strip().rstrip("%")) == pytest.approx(100 * cell["mfu"], abs=0.05)
    assert _figure(rows["no checkpointing"][5].split(" s:")[0]) == pytest.approx(cell["step_time_s"], abs=0.05)
    ratio = json.loads((RESULTS / "h200_scale_4" / "ladder-ratio.json").read_text())
    for part in ("step", "learner"):
        assert f"{part} time {ratio[f'fp16_over_bf16_{part}_time']['qwen2.5-1.5b']:.3f}x" in section


def test_the_fifth_scale_run_quoted_in_results_is_that_of_its_files():
    section = _section("### Fifth run")
    rows = _table_rows(section)
    for quoted, name in (("`--compile-layers`", "ladder-4k-compiled.json"), ("eager", "ladder-4k-no-ckpt.json")):
        [cell] = json.loads((RESULTS / "h200_scale_5" / name).read_text())["cells"]
        assert _figure(rows[quoted][2]) == pytest.approx(cell["learner_peak_gb"], abs=0.05)
        shown_tokens, shown_mfu = rows[quoted][3].rsplit(", ", 1)
        assert _figure(shown_tokens) == pytest.approx(cell["learner_tokens_per_s"], rel=0.001)
        assert float(shown_mfu.strip().rstrip("%")) == pytest.approx(100 * cell["mfu"], abs=0.05)
        assert _figure(rows[quoted][4].split(" s:")[0]) == pytest.approx(cell["step_time_s"], abs=0.05)
    for quoted, folder in (("fourth run", "h200_scale_4"), ("fifth run", "h200_scale_5")):
        [row] = [cells for label, cells in rows.items() if label.startswith(quoted)]
        loop = _summarized_loops(RESULTS / folder)["loop-128x8-fast"]
        for column, summarized in ((2, 4), (3, 6), (4, 7)):  # s/step, sampler tok/s, end-to-end tok/s
            assert _figure(row[column]) == pytest.approx(_figure(loop[summarized]), rel=0.01)
        sample, update, _ = (float(x) for x in row[5].split(" / "))
        assert (sample, update) == (_figure(loop[8]), _figure(loop[10]))
        assert row[6].strip() == loop[-2].strip()


def test_the_sixth_scale_run_quoted_in_results_is_that_of_its_files():
    section = _section("### Sixth run")
    rows = _table_rows(section)
    for quoted, folder, name in (("fifth run", "h200_scale_5", "loop-128x8-fast"),
                                 ("sixth run", "h200_scale_6", "loop-128x8-1024")):
        [row] = [cells for label, cells in rows.items() if label.startswith(quoted)]
        loop = _summarized_loops(RESULTS / folder)[name]
        for column, summarized in ((2, 4), (3, 6), (4, 7)):  # s/step, sampler tok/s, end-to-end tok/s
            assert _figure(row[column]) == pytest.approx(_figure(loop[summarized]), rel=0.01)
        sample, update, rest = (float(x) for x in row[5].split(" / "))
        assert (sample, update) == (_figure(loop[8]), _figure(loop[10]))
        assert rest == pytest.approx(sum(_figure(loop[c]) for c in (11, 12, 13)), abs=0.011)
        assert row[6].strip() == loop[-2].strip()
    host = json.loads((RESULTS / "h200_scale_6" / "sampler-host.json").read_text())
    for quoted, way in (("flat log-prob lists, collector paused", "sampler"), ("flat lists, collector running", "collecting"),
                        ("a log-prob dict per token", "logprob-dicts"), ("dicts, collector running", "neither")):
        [row] = [cells for label, cells in rows.items() if label.startswith(quoted)]
        assert _figure(row[2]) == pytest.approx(host["median_tokens_per_s"][way], abs=0.5)
        assert {_figure(row[3])} == {batch["collections"] for batch in host["batches"][way]}
    for model, length in (("smollm2-135m", 1024), ("smollm2-135m", 4096), ("smollm2-135m", 8192), ("qwen2.5-0.5b", 1024)):
        [cell] = json.loads((RESULTS / "h200_scale_6" / f"ladder-{model}-{length}.json").read_text())["cells"]
        label = {"smollm2-135m": "SmolLM2-135M", "qwen2.5-0.5b": "Qwen2.5-0.5B"}[model] + f" × {length:,}"
        row = rows[label]
        assert _figure(row[2]) == cell["micro_batch_size"]
        assert _figure(row[3]) == pytest.approx(cell["learner_peak_gb"], abs=0.05)
        assert _figure(row[4]) == pytest.approx(cell["sampler_tokens_per_s"], abs=0.5)
        shown_tokens, shown_mfu = row[5].rsplit(", ", 1)
        assert _figure(shown_tokens) == pytest.approx(cell["learner_tokens_per_s"], abs=0.5)
        assert float(shown_mfu.strip().rstrip("%")) == pytest.approx(100 * cell["mfu"], abs=0.05)
        step, split = row[6].split(" s:")
        assert _figure(step) == pytest.approx(cell["step_time_s"], abs=0.05)
        parts = [float(x) for x in split.split(" / ")]
        assert parts == pytest.approx([cell[f"perf/time/{p}"] for p in ("sample", "score", "update", "sync", "other")],
                                      abs=0.006)


def test_the_seventh_scale_run_quoted_in_results_is_that_of_its_files():
    folder = RESULTS / "h200_scale_7"
    assert _summarized(folder) in (folder / "README.md").read_text()  # the README's table is summarize.py's whole output
    section = _section("### Seventh run")
    rows = {line.split("|")[1].strip().split(",")[0]: line.split("|")[2:-1] for line in section.splitlines()
            if line.startswith("| fp16") or line.startswith("| bf16")}
    ratio = json.loads((folder / "ladder-ratio.json").read_text())
    for dtype in ("fp16", "bf16"):
        cells = [c for c in ratio["ratio_cells"] if c["dtype"] == dtype]
        shown = [[_figure(x) for x in column.replace("%", "").split(" / ")] for column in rows[dtype]]
        assert shown == [pytest.approx([c["step_time_s"] for c in cells], abs=0.006),
                         pytest.approx([c["perf/time/sample"] for c in cells], abs=0.006),
                         pytest.approx([c["perf/time/score"] + c["perf/time/update"] for c in cells], abs=0.006),
                         pytest.approx([100 * c["mfu"] for c in cells], abs=0.05)]
    assert f"{ratio['fp16_over_bf16_step_time']['qwen2.5-1.5b']:.3f}x bf16's" in section
    assert f"learner takes {ratio['fp16_over_bf16_learner_time']['qwen2.5-1.5b']:.3f}x" in section


def _profiled_ms(folder) -> dict[str, tuple[float, ...]]:
    """Each dtype's profiled update in ``folder``: "all" (its device time) and each operator → (fp16 ms, bf16 ms)."""
    by_dtype = {}
    for dtype in ("fp16", "bf16"):
        [cell] = json.loads((folder / f"ladder-1k-profile-{dtype}.json").read_text())["cells"]
        _, _, ms, share = cell["operators"][0]
        by_dtype[dtype] = {"all": ms / share} | {op[0]: op[2] for op in cell["operators"]}
    return {key: (by_dtype["fp16"][key], by_dtype["bf16"][key]) for key in by_dtype["fp16"].keys() & by_dtype["bf16"]}


def _quoted_profile(text: str) -> dict[str, list[float]]:
    """The profile table's rows in ``text``: "all" or the operator in backticks → [fp16 ms, bf16 ms, ratio]."""
    rows = {}
    for line in text.splitlines():
        label = line.split("|")[1] if line.startswith("| ") else ""
        key = "all" if "all device time" in label else (re.findall(r"`(aten::\w+)`", label) or [None])[0]
        if key:
            rows[key] = [_figure(cell) for cell in line.split("|")[2:5]]
    return rows


def test_the_eighth_scale_run_quoted_in_results_is_that_of_its_files():
    folder = RESULTS / "h200_scale_8"
    readme = (folder / "README.md").read_text()
    assert _summarized(folder) in readme  # the README's table is summarize.py's whole output
    section = _section("### Eighth run")
    profiled = _profiled_ms(folder)
    for text, expected_rows in ((section, 3), (readme, 5)):
        quoted = _quoted_profile(text)
        assert len(quoted) == expected_rows and "all" in quoted and "aten::mm" in quoted
        for key, (fp16, bf16, ratio) in quoted.items():
            assert (fp16, bf16) == (pytest.approx(profiled[key][0], abs=0.6), pytest.approx(profiled[key][1], abs=0.6))
            assert ratio == pytest.approx(profiled[key][0] / profiled[key][1], abs=0.0006)
    cells = {}
    for name in ("ladder-1k-profile-fp16", "ladder-1k-profile-bf16", "ladder-4k-compiled",
                 *(f"ladder-qwen2.5-3b-{n}" for n in (1024, 4096, 8192))):
        [cells[name]] = json.loads((folder / f"{name}.json").read_text())["cells"]
    learner = {d: cells[f"ladder-1k-profile-{d}"]["perf/time/score"] + cells[f"ladder-1k-profile-{d}"]["perf/time/update"]
               for d in ("fp16", "bf16")}
    assert f"{learner['fp16'] / learner['bf16']:.3f}x for rescoring + update" in section
    assert f"({learner['fp16']:.2f} against {learner['bf16']:.2f} s" in section
    mfus = [f"{cells[f'ladder-qwen2.5-3b-{n}']['mfu']:.1%}" for n in (1024, 4096, 8192)]
    assert f"{mfus[0]}, {mfus[1]} and {mfus[2]} MFU" in section
    assert f"({cells['ladder-qwen2.5-3b-8192']['step_time_s']:.0f} s a step at 8k)" in section
    assert {round(cells[f"ladder-qwen2.5-3b-{n}"]["learner_peak_gb"], 1) for n in (1024, 4096, 8192)} == {69.0}
    assert f"**{cells['ladder-4k-compiled']['mfu']:.1%} MFU at 4k" in section


def test_the_ladders_grid_in_results_is_what_grid_py_prints_of_the_runs():
    grid = load_script("benchmarks/results/h200_scale/grid.py")
    rows = grid.grid_rows(RESULTS)
    section = _section("### The ladder's grid")
    assert [line for line in section.splitlines() if line.startswith("|")] == rows
    assert len(rows) == 2 + len(grid.MODELS) * len(grid.LENGTHS)
    # A cell measured once in each run comes from the newest, and a run's repeated cells show at their median step time.
    [cell] = json.loads((RESULTS / "h200_scale_6" / "ladder-smollm2-135m-1024.json").read_text())["cells"]
    assert grid.grid_cells(RESULTS)["smollm2-135m", 1024] == ("h200_scale_6", cell)
    ratio = json.loads((RESULTS / "h200_scale_7" / "ladder-ratio.json").read_text())["ratio_cells"]
    times = sorted(c["step_time_s"] for c in ratio if c["dtype"] == "fp16" and c.get("fits"))
    run, shown = grid.grid_cells(RESULTS)["qwen2.5-1.5b", 1024]
    assert (run, shown["step_time_s"]) == ("h200_scale_7", times[1])
    # Cells without checkpointing or compiled are not the grid's.
    assert grid.grid_cells(RESULTS)["qwen2.5-1.5b", 4096][0] == "h200_scale_3"
    # A run's median of three stands before a later run's single measurement of the cell (the eighth run's profiled one).
    [profiled] = json.loads((RESULTS / "h200_scale_8" / "ladder-1k-profile-fp16.json").read_text())["cells"]
    assert (profiled["model"], profiled["response_length"], profiled["dtype"]) == ("qwen2.5-1.5b", 1024, "fp16")
    assert grid.grid_cells(RESULTS)["qwen2.5-3b", 8192][0] == "h200_scale_8"
    assert not any("not measured yet" in row for row in rows)

ARM_NAMES = {"IS-PG": "pg", "GRPO": "grpo", "GRPO-TIS": "grpo-tis"}
ARM_ROW = re.compile(r"\| (IS-PG|GRPO|GRPO-TIS) (fp16|bf16|fp32) s\d \|")


def _arm_rows(heading: str) -> list[list[str]]:
    """The cells of the arm rows ("| IS-PG fp16 s0 | …") in results.md's section under ``heading``."""
    return [line.split("|")[1:-1] for line in _section(heading).splitlines() if ARM_ROW.match(line)]


def _held_out(cell: str, stats: dict) -> None:
    shown = [None if x.strip() == "–" else float(x) for x in cell.split("(")[0].split(" / ")]
    assert shown == [pytest.approx(stats["held_out"][s], abs=0.006) if s in stats["held_out"] else None
                     for s in (50, 100, 150, 200)]


def test_the_ten_arms_quoted_in_results_are_those_of_the_round5_metrics():
    report = load_script("experiments/h200/arms_report.py")
    arms = report.load_arms([RESULTS / "h200_round5", RESULTS / "h200_round5" / "reference"])
    quoted = _arm_rows("## 4c. The paper's pair")
    assert len(quoted) == len(arms) == 10
    for arm, steps, first, logp, k3, seq_kl, held_out, _ in quoted:
        algo, dtype, seed = arm.split()
        stats = report.arm_stats(arms[f"{ARM_NAMES[algo]}-{dtype}-{seed}"])
        assert (int(steps), int(first)) == (stats["steps"], stats["first_step"]), arm
        assert [float(logp), float(k3), float(seq_kl)] == pytest.approx(
            [stats["abs_logp_diff"], stats["k3"], stats["seq_kl"]], rel=0.06), arm
        _held_out(held_out, stats)


@pytest.mark.parametrize("heading, folder, count", [("### Round 6:", "h200_round6", 3), ("### Round 7:", "h200_round7", 2)])
def test_the_200_step_arms_quoted_in_results_are_those_of_their_metrics(heading, folder, count):
    report = load_script("experiments/h200/arms_report.py")
    arms = report.load_arms([RESULTS / folder])
    quoted = _arm_rows(heading)
    assert len(quoted) == len(arms) == count
    for arm, first, logp, k3, seq_kl, first_last, held_out, _ in quoted:
        algo, dtype, seed = arm.split()
        stats = report.arm_stats(arms[f"{ARM_NAMES[algo]}-{dtype}-{seed}"])
        assert int(first) == stats["first_step"] and stats["steps"] == 200, arm
        assert [float(x) for x in (logp, k3, seq_kl, *first_last.split(" / "))] == pytest.approx(
            [stats[k] for k in ("abs_logp_diff", "k3", "seq_kl", "abs_logp_diff_first_20", "abs_logp_diff_last_20")],
            rel=0.06), arm
        _held_out(held_out, stats)


@pytest.mark.parametrize("round_, held_out_key, seed", [(8, "held_out", ""), (9, "held_out_reward", "-s1")])
def test_the_long_arms_quoted_in_results_and_their_readme_are_those_of_their_metrics(round_, held_out_key, seed):
    report = load_script("experiments/h200/arms_report.py")
    folder = RESULTS / f"h200_round{round_}"
    arms = report.load_arms([folder])
    section = _section(f"### Round {round_}:")
    assert "\n".join(report.table(arms)) in (folder / "README.md").read_text()
    rows = _table_rows(section, start="| IS-PG ")
    assert len(rows) == len(arms) == 2
    for arm, cells in rows.items():
        _, dtype, rest = arm.split()
        s = report.arm_stats(arms[f"pg-{dtype}-{rest}"])
        steps, best, windows, weights, logp, k3, seq_kl, held_out, _ = (c.strip() for c in cells[2:11])
        assert (int(steps), best) == (s["steps"], f"{s['best'][0]:.2f} ({s['best'][1]})"), arm
        assert windows == " / ".join(report._fmt(s["windows"][w], ".2f") for w in (41, 61, 91)), arm
        assert weights == "{:.2f}–{:.2f}".format(*s["weights"]), arm
        assert [float(logp), float(k3), float(seq_kl)] == pytest.approx(
            [s["abs_logp_diff"], s["k3"], s["seq_kl"]], rel=0.06), arm
        assert held_out == " / ".join(report._fmt(s[held_out_key].get(e), ".2f") for e in (50, 100)), arm
    # The length slopes: bf16's share of falling steps and both medians, as the bullet quotes them.
    slopes = {dtype: [r["mismatch/seq_logratio_slope"] for r in arms[f"pg-{dtype}-long{seed}"] if "reward/mean" in r]
              for dtype in ("bf16", "fp16")}
    quoted = re.search(r"fell with response length\s+at (\d+)% of steps \(median slope −([\d.]+)e-3 per token; "
                       r"fp16's −(\d+)e-(\d)", section)
    bf16_share = sum(x < 0 for x in slopes["bf16"]) / len(slopes["bf16"])
    assert int(quoted[1]) == round(100 * bf16_share)
    assert -float(quoted[2]) * 1e-3 == pytest.approx(statistics.median(slopes["bf16"]), abs=0.05e-3)
    fp16_slope = -float(quoted[3]) * 10 ** -int(quoted[4])
    assert fp16_slope == pytest.approx(statistics.median(slopes["fp16"]), abs=0.5 * 10 ** -int(quoted[4]))


def test_round9s_collapse_is_that_of_the_bf16_arms_metrics():
    """The fall and the mismatch's rise quoted in Round 9's bullets: means of steps 63–72 against 78–107."""
    report = load_script("experiments/h200/arms_report.py")
    rows = [r for r in report.load_arms([RESULTS / "h200_round9"])["pg-bf16-long-s1"] if "reward/mean" in r]
    def mean(key, first, last):
        return statistics.mean(r[key] for r in rows if first <= r["step"] <= last)
    section = _section("### Round 9:")
    assert "fell to 0.003\n  by step 78 and stayed at ≤ 0.004" in section
    assert round(next(r for r in rows if r["step"] == 78)["reward/mean"], 3) == 0.003
    assert max(r["reward/mean"] for r in rows if r["step"] >= 78) < 0.0045
    assert max(r["reward/mean"] for r in rows if r["step"] <= 72) == pytest.approx(0.10, abs=0.005)
    assert mean("mismatch/abs_logp_diff_mean", 63, 72) == pytest.approx(4e-2, rel=0.1)
    assert mean("mismatch/abs_logp_diff_mean", 78, 107) == pytest.approx(1e-1, rel=0.1)
    assert mean("mismatch/k3", 63, 72) == pytest.approx(3.5e-3, rel=0.05)
    assert mean("mismatch/k3", 78, 107) == pytest.approx(2.8e-2, rel=0.05)
    assert mean("mismatch/mu/0.9-1/token_frac", 63, 72) == pytest.approx(0.45, abs=0.005)
    assert mean("mismatch/mu/0.9-1/token_frac", 78, 107) == pytest.approx(0.11, abs=0.005)
    assert max((r["train/grad_norm"], r["step"]) for r in rows)[1] == 72


def _round7_table(bullet: str) -> dict[str, list[str]]:
    """The rows of the table nested under Round 7's bullet that starts with ``bullet``."""
    text = _section("### Round 7:").split(f"- **{bullet}", 1)[1].split("\n- **", 1)[0]
    return _table_rows(text, start="  | ")


def test_the_round7_lab_quoted_in_results_is_that_of_its_file():
    measured = json.loads((RESULTS / "h200_round7" / "lab-pair" / "mismatch.json").read_text())["dtypes"]
    rows = _round7_table("The pair's lab")
    for dtype in ("bf16", "fp16", "fp32"):
        m = measured[dtype]
        shown = [float(x) for cell in rows[dtype][2:8] for x in NUMBER.findall(cell)]
        assert shown == pytest.approx([
            m["mismatch/abs_logp_diff_mean"], m["mismatch/seq_logratio_std"], m["mismatch/k3"], m["mismatch/seq_kl"],
            m["mismatch/mu/0-0.1/abs_logp_diff_mean"], m["mismatch/mu/0.9-1/abs_logp_diff_mean"],
            m["mismatch/position/0-16/abs_logp_diff_mean"], m["mismatch/position/256-1024/abs_logp_diff_mean"],
        ], rel=0.06), dtype


def test_the_round7_speed_table_quoted_in_results_is_that_of_its_two_runs():
    folder = RESULTS / "h200_round7"
    second = json.loads((folder / "speed" / "step_time.json").read_text())["dtypes"]
    # The first run's figures as its log printed them, in the page's units (it stopped before writing its JSON).
    first = {(dtype, f"learner_step_s/{kind}" if role == "learner step" else f"sampler_tokens_per_s/{kind}"):
             float(value.replace(",", ""))
             for dtype, kind, role, value in re.findall(r"^(fp16|bf16): (\w+) (learner step|sampler) ([\d,.]+)",
                                                        (folder / "speed-first.log").read_text(), re.M)}
    rows = _round7_table("The speed table")
    keys = ("learner_step_s/builtin", "learner_step_s/deepspeed", "sampler_tokens_per_s/builtin",
            "sampler_tokens_per_s/vllm")
    for dtype in ("fp16", "bf16"):
        for key, cell in zip(keys, rows[dtype][2:6]):
            runs = [None if x.strip() == "–" else _figure(x) for x in cell.split(" / ")]
            shown_unit = 1000 if key.startswith("learner") else 1  # seconds in the JSON, ms on the page
            expected = [first.get((dtype, key)), second[dtype][key] * shown_unit]
            assert runs == [None if e is None else pytest.approx(e, rel=0.001) for e in expected], (dtype, key)


def test_the_second_runs_loops_quoted_in_results_are_those_of_their_metrics():
    rows = _summarized_loops(RESULTS / "h200_scale_2")
    page = (ROOT / "docs" / "results.md").read_text().splitlines()
    quoted = {loop: next(line.split("|") for line in page if line.startswith(start))
              for loop, start in (("loop-8x4", "| 8 × 4, `--vllm-kv-cache-gb 2`"),
                                  ("loop-128x8", "| 128 × 8, `--vllm-kv-cache-gb 30`"),
                                  ("loop-128x8-tuned", "| 128 × 8 tuned"))}
    # The page's columns 2-4 are s/step, sampler tok/s and end-to-end tok/s; summarize.py's 4, 6 and 7.
    for loop, cells in quoted.items():
        for page_column, column in ((2, 4), (3, 6), (4, 7)):
            assert _figure(cells[page_column]) == pytest.approx(_figure(rows[loop][column]), rel=0.01), (loop, column)


def test_the_claims_tables_steps_to_threshold_are_those_of_every_run():
    report = load_script("experiments/h200/arms_report.py")
    firsts: dict[str, list[int]] = {"fp16": [], "bf16": []}
    for folder in ("h200_round5", "h200_round5/reference", "h200_round6", "h200_round7"):
        for name, rows in report.load_arms([RESULTS / folder]).items():
            algo, dtype = report.NAME.match(name).group("algo", "dtype")
            if algo in ("pg", "grpo") and dtype in firsts:
                firsts[dtype].append(report.arm_stats(rows)["first_step"])
    [row] = [line for line in _section("### The paper's claims").splitlines() if line.startswith("| fp16 trains faster")]
    quoted = re.search(r"six fp16 runs (\d+)–(\d+) \(median (\d+)\), six bf16 runs (\d+)–(\d+) \(median (\d+)\)", row)
    computed = [(min(v), max(v), statistics.median(v)) for v in (firsts["fp16"], firsts["bf16"])]
    assert [len(firsts["fp16"]), len(firsts["bf16"])] == [6, 6]
    assert [int(x) for x in quoted.groups()] == [round(x) for triple in computed for x in triple]
