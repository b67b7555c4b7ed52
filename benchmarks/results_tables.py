"""Writes the result tables of docs/results.md from the committed files under benchmarks/results/.

    python benchmarks/results_tables.py            # rewrite every table between its markers
    python benchmarks/results_tables.py --check    # exit 1, naming each table that its files would change

A table sits between ``<!-- table: NAME -->`` and ``<!-- /table: NAME -->`` on the page; NAME is a key of
``TABLES``, whose renderer reads the result files and returns the table's lines. The lines between the
markers are the renderer's, indented as the opening marker is (a table inside a list item). A section added
later gets its tables by one renderer each and one line in ``TABLES``. Nothing here needs a GPU or a network.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Callable, Optional

from precision_oat.compare.loading import NAME
from precision_oat.compare.stats import mean_of
from precision_oat.lab.lab import labelled_arms

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "results.md"
MARKER = re.compile(r"^(?P<indent> *)<!-- table: (?P<name>[\w.-]+) -->$")


@functools.cache
def script(relative: str):
    """A script of the repository imported as a module, once (the scripts are not a package)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def read_json(relative: str) -> dict:
    return json.loads((RESULTS / relative).read_text())


def cell(relative: str) -> dict:
    """The one cell of a scale-ladder file."""
    [only] = read_json(relative)["cells"]
    return only


EXPONENT = re.compile(r"(?<=\d)e([+-])0*(\d)")


def short_exponents(line: str) -> str:
    """2.2e-03 → 2.2e-3, as the page writes figures."""
    return EXPONENT.sub(lambda m: "e" + ("-" if m[1] == "-" else "") + m[2], line)


def markdown(header: list[str], rows: list[list[str]]) -> list[str]:
    return [f"| {' | '.join(header)} |", "|---" * len(header) + "|",
            *(short_exponents(f"| {' | '.join(row)} |".replace(" |  |", " | |")) for row in rows)]


def k(value: float) -> str:
    """A throughput in thousands: 20.2k."""
    return f"{value / 1000:.1f}k"


def fmt(value: Optional[float], spec: str) -> str:
    return "–" if value is None else format(value, spec)


def sig(value: float, digits: int) -> str:
    """``digits`` significant digits, in scientific notation below 0.1: 0.818, 1.22e-2, 6.65e-6."""
    return f"{value:.{digits}g}" if value == 0 or abs(value) >= 0.1 else f"{value:.{digits - 1}e}"


# --- the lab and the speed table (§1, §3, round 7) ---


def lab_table(relative: str, columns: list[tuple[str, str, int]]) -> list[str]:
    """One row per dtype of a mismatch lab's JSON; ``columns`` are (heading, metric, significant digits)."""
    dtypes = read_json(relative)["dtypes"]
    return markdown(["dtype", *(c[0] for c in columns)],
                    [[dtype, *(sig(m[key], digits) for _, key, digits in columns)] for dtype, m in dtypes.items()])


def lab_ratios(relative: str) -> list[str]:
    """bf16 over fp16 for the lab's four headline figures."""
    d = read_json(relative)["dtypes"]
    keys = (("token mean \\|Δ\\|", "mismatch/abs_logp_diff_mean"), ("std of ρ", "mismatch/seq_logratio_std"),
            ("k3", "mismatch/k3"), ("sequence KL[μ‖π]", "mismatch/seq_kl"))
    return markdown(["bf16 / fp16", *(name for name, _ in keys)],
                    [["ratio", *(times(d["bf16"][key] / d["fp16"][key]) for _, key in keys)]])


def times(ratio: float) -> str:
    """A ratio as the page writes it: 8.4x, 63x."""
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def step_time_table() -> list[str]:
    """§3: the learner step and the KV-cache sampler per dtype, and fp16 over bf16."""
    d = read_json("h200_step_time.json")
    rows = [[dtype, f"{m['learner_step_s'] * 1000:.1f} ms", f"{m['sampler_tokens_per_s']:,.0f} tok/s"]
            for dtype, m in d["dtypes"].items()]
    rows.append(["fp16 / bf16", f"{d['fp16_over_bf16_step_time']:.3f}x",
                 f"{d['fp16_over_bf16_sampler_throughput']:.2f}x (throughput)"])
    return markdown(["dtype", "learner step (rescoring + fwd/bwd + AdamW on fp32 masters)", "KV-cache sampler"], rows)


def round7_speed_table() -> list[str]:
    """Round 7's two speed runs: the first as its log printed it (it wrote no JSON), the second from its JSON."""
    first = {(dtype, kind, role): float(value.replace(",", ""))
             for dtype, kind, role, value in re.findall(r"^(fp16|bf16): (\w+) (learner step|sampler) ([\d,.]+)",
                                                        (RESULTS / "h200_round7/speed-first.log").read_text(), re.M)}
    second = read_json("h200_round7/speed/step_time.json")["dtypes"]
    columns = (("built-in learner step", "builtin", "learner step"),
               ("DeepSpeed learner step", "deepspeed", "learner step"),
               ("built-in sampler", "builtin", "sampler"), ("vLLM sampler", "vllm", "sampler"))
    rows = []
    for dtype in ("fp16", "bf16"):
        cells = []
        for _, kind, role in columns:
            if role == "learner step":
                later = second[dtype].get(f"learner_step_s/{kind}")
                pair = (first.get((dtype, kind, role)), None if later is None else later * 1000)
                cells.append(" / ".join(fmt(x, ".1f") for x in pair) + " ms")
            else:
                pair = (first.get((dtype, kind, role)), second[dtype].get(f"sampler_tokens_per_s/{kind}"))
                cells.append(" / ".join(fmt(x, ",.0f") for x in pair) + " tok/s")
        rows.append([dtype, *cells])
    return markdown(["dtype", *(c[0] for c in columns)], rows)


# --- RL on arithmetic (§2, rounds 1–3) and round 4 (§4b) ---


def metrics(relative: str) -> list[dict]:
    """A run's training rows (those with a reward), in step order."""
    lines = (RESULTS / relative / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, filter(str.strip, lines)) if "reward/mean" in r]


def rewards(relative: str) -> list[float]:
    return [r["reward/mean"] for r in metrics(relative)]


def first_step_at(reward: list[float], window: int, threshold: float) -> Optional[int]:
    """The first step whose mean reward over the ``window`` steps ending there is ≥ ``threshold``."""
    return next((i + 1 for i in range(window - 1, len(reward))
                 if statistics.mean(reward[i + 1 - window:i + 1]) >= threshold), None)


def arithmetic_table(folder: str, seeds: tuple[int, ...], window: int, threshold: float,
                     with_mean: bool) -> Callable[[], list[str]]:
    """fp16 against bf16 per algorithm and seed at lr 1e-5: the mean reward of the first and last 15 steps, and
    the first step whose ``window``-step mean reaches ``threshold``; with ``with_mean``, each algorithm's mean."""
    def render() -> list[str]:
        rows = []
        for algo in ("pg", "grpo"):
            figures = {d: [] for d in ("fp16", "bf16")}
            for seed in seeds:
                for dtype in figures:
                    reward = rewards(f"{folder}/rl-{algo}-{dtype}-lr1e-5-seed{seed}")
                    figures[dtype].append((statistics.mean(reward[:15]), statistics.mean(reward[-15:]),
                                           first_step_at(reward, window, threshold)))
                rows.append([algo, str(seed), *(f"{f[-1][0]:.3f} → **{f[-1][1]:.3f}**" for f in figures.values()),
                             " / ".join(str(f[-1][2]) for f in figures.values())])
            if with_mean:
                means = {d: [statistics.mean(x[i] for x in f) for i in range(3)] for d, f in figures.items()}
                rows.append([algo, "mean", *(f"{m[0]:.3f} → **{m[1]:.3f}**" for m in means.values()),
                             " / ".join(f"{m[2]:.0f}" for m in means.values())])
        return markdown(["algo", "seed", "fp16: first 15 → last 15", "bf16: first 15 → last 15",
                         f"step where the {window}-step reward ≥ {threshold:g} (fp16 / bf16)"], rows)
    return render


def other_settings_table() -> list[str]:
    """§2.3: lr 5e-5 at temperature 1 (three seeds: each last-15 mean and their mean), temperature 0.3 (one seed)."""
    def cell(folder: str, algo: str, dtype: str, lr: str, seeds: tuple[int, ...]) -> str:
        runs = [rewards(f"{folder}/rl-{algo}-{dtype}-lr{lr}-seed{seed}") for seed in seeds]
        if len(runs) == 1:
            return f"{statistics.mean(runs[0][:15]):.3f} → {statistics.mean(runs[0][-15:]):.3f}"
        last = [statistics.mean(r[-15:]) for r in runs]
        return ", ".join(f"{x:.3f}" for x in last) + f" (mean {statistics.mean(last):.3f})"
    rows = [[algo, lr, temperature, label, *(cell(folder, algo, d, lr, seeds) for d in ("fp16", "bf16"))]
            for folder, lr, temperature, seeds, label in (("h200_rl", "5e-5", "1.0", (0, 1, 2), "0, 1, 2 (round 1)"),
                                                          ("h200_rl_t03", "1e-5", "0.3", (0,), "0 (round 2)"))
            for algo in ("pg", "grpo")]
    return markdown(["algo", "lr", "temperature", "seeds", "fp16: last 15 (or first 15 → last 15)",
                     "bf16: last 15 (or first 15 → last 15)"], rows)


def round4_table() -> list[str]:
    """§4b: the two GRPO runs of round 4, their reward, held-out exact counts and mismatch over the run."""
    rows = []
    for dtype in ("fp16", "bf16"):
        name = f"grpo-{dtype}-seed0"
        train = metrics(f"h200_round4/{name}")
        lines = (RESULTS / "h200_round4" / name / "metrics.jsonl").read_text().splitlines()
        held = {r["step"]: r["eval/counting/avg@1"] for r in map(json.loads, lines) if "eval/counting/avg@1" in r}
        reward = [r["reward/mean"] for r in train]

        def mean(key: str) -> float:
            return statistics.mean(r[key] for r in train)
        rows.append([f"GRPO {dtype}", str(train[-1]["step"]),
                     f"{statistics.mean(reward[:5]):.3f} → {statistics.mean(reward[-5:]):.3f}",
                     " / ".join(f"{held[step]:.3f}" for step in (25, 50)), sig(mean("mismatch/abs_logp_diff_mean"), 3),
                     f"{mean('mismatch/seq_logratio_std'):.2g}", sig(mean("mismatch/k3"), 2),
                     f"{mean('response/length_mean'):.0f}"])
    return markdown(["run", "steps", "reward, mean of steps 1–5 → last 5", "held-out avg@1 (step 25 / 50)",
                     "token mean \\|Δ\\|", "std of ρ", "k3", "mean response tokens"], rows)


# --- SmolLM2's loop and the scale ladder (§4d) ---


def loop_stats(relative: str) -> dict:
    """A loop's figures as summarize.py computes them; a bare metrics file (no config, no time split) gives the
    step time and throughputs only."""
    path = RESULTS / relative
    if path.is_dir():
        return script("benchmarks/results/h200_scale/summarize.py").loop_stats(path)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    step = statistics.median(b["time/elapsed_s"] - a["time/elapsed_s"] for a, b in zip(rows, rows[1:]))
    tokens = statistics.median(r["response/length_mean"] * 8 * 4 for r in rows[1:])  # the one bare file: 8 × 4
    return {"step_s": step, "tokens": tokens, "sampler_tokens_per_s": statistics.median(
        r["perf/sample_tokens_per_s"] for r in rows[1:]), "split": None, "outside": None}


LOOP_HEADER = ["s per step", "response tokens per step", "vLLM sampler, tok/s", "generated tok/s, end to end",
               "sampling / scoring + update / the rest (s)", "outside sampling and updating"]


def loop_cells(s: dict) -> list[str]:
    split = s["split"]
    parts = "–" if split is None else (f"{split['sample']:.2f} / {split['score'] + split['update']:.2f} / "
                                       f"{split['sync'] + split['reward'] + split['other']:.2f}")
    return [f"{s['step_s']:.2f}", f"{s['tokens']:,.0f}", k(s["sampler_tokens_per_s"]), k(s["tokens"] / s["step_s"]),
            parts, fmt(s["outside"], ".1%")]


def loop_table(title: str, loops: list[tuple[str, str]]) -> Callable[[], list[str]]:
    """One row per (label, loop folder under benchmarks/results)."""
    return lambda: markdown([title, *LOOP_HEADER], [[label, *loop_cells(loop_stats(path))] for label, path in loops])


CELL_HEADER = ["micro-batch", "learner peak GiB", "sampler tok/s", "learner tok/s", "MFU",
               "step s: sample / score / update / sync / other"]


def cell_cells(c: dict) -> list[str]:
    parts = " / ".join(f"{c[f'perf/time/{p}']:.2f}" for p in ("sample", "score", "update", "sync", "other"))
    return [str(c["micro_batch_size"]), f"{c['learner_peak_gb']:.1f}", f"{c['sampler_tokens_per_s']:,.0f}",
            f"{c['learner_tokens_per_s']:,.0f}", f"{c['mfu']:.1%}", f"{c['step_time_s']:.1f}: {parts}"]


def cell_table(title: str, cells: list[tuple[str, str]]) -> Callable[[], list[str]]:
    """One row per (label, scale-ladder file holding one cell)."""
    return lambda: markdown([title, *CELL_HEADER], [[label, *cell_cells(cell(path))] for label, path in cells])


def ladder_ratio_table(relative: str, label: str) -> list[str]:
    """A ladder run's fp16/bf16 ratios of the 1.5B shape at 1k: medians of its cells' step and learner times."""
    ratio = read_json(relative)
    return markdown(["the 1.5B shape at 1k, fp16 / bf16 (medians of the run's cells)", "step time", "learner time"],
                    [[label, *(f"{ratio[f'fp16_over_bf16_{part}_time']['qwen2.5-1.5b']:.3f}x"
                               for part in ("step", "learner"))]])


def ratio_table() -> list[str]:
    """The seventh run's fp16/bf16 cells of the 1.5B shape at 1k, in the order they ran, and the medians' ratios."""
    ratio = read_json("h200_scale_7/ladder-ratio.json")
    rows = []
    for c in ratio["ratio_cells"]:
        learner = c["perf/time/score"] + c["perf/time/update"]
        rows.append([c["dtype"], f"{c['step_time_s']:.2f}", f"{c['perf/time/sample']:.2f}", f"{learner:.2f}",
                     f"{c['mfu']:.1%}"])
    rows.append(["fp16 / bf16, medians", f"{ratio['fp16_over_bf16_step_time']['qwen2.5-1.5b']:.3f}x", "",
                 f"{ratio['fp16_over_bf16_learner_time']['qwen2.5-1.5b']:.3f}x", ""])
    return markdown(["cell (1.5B shape, 1k tokens, micro-batch 32, checkpointing)", "step s", "sample s",
                     "learner s (rescoring + update)", "MFU"], rows)


def profile_table() -> list[str]:
    """The eighth run's profiled update of each dtype: all device time, matrix products and copies."""
    ops = {}
    for dtype in ("fp16", "bf16"):
        c = cell(f"h200_scale_8/ladder-1k-profile-{dtype}.json")
        _, _, ms, share = c["operators"][0]
        ops[dtype] = {"all": ms / share} | {op[0]: op[2] for op in c["operators"]}
    learner = {d: cell(f"h200_scale_8/ladder-1k-profile-{d}.json") for d in ("fp16", "bf16")}
    learner = {d: c["perf/time/score"] + c["perf/time/update"] for d, c in learner.items()}
    labels = {"all": "all device time", "aten::mm": "matrix products (`aten::mm`)",
              "aten::copy_": "copies (`aten::copy_`)"}
    fp16, bf16 = ops["fp16"], ops["bf16"]
    rows = [[label, f"{fp16[key]:,.0f}", f"{bf16[key]:,.0f}", f"{fp16[key] / bf16[key]:.3f}"]
            for key, label in labels.items()]
    rows.append(["timed rescoring + update (s, not profiled)", f"{learner['fp16']:.2f}", f"{learner['bf16']:.2f}",
                 f"{learner['fp16'] / learner['bf16']:.3f}"])
    return markdown(["the 1.5B shape at 1k, one profiled update per dtype", "fp16 ms", "bf16 ms", "fp16/bf16"], rows)


def sampler_host_table() -> list[str]:
    host = read_json("h200_scale_6/sampler-host.json")
    ways = (("flat log-prob lists, collector paused (the sampler's way)", "sampler"),
            ("flat lists, collector running", "collecting"), ("a log-prob dict per token, collector paused",
                                                              "logprob-dicts"),
            ("dicts, collector running (the former way)", "neither"))
    rows = []
    for label, way in ways:
        [collections] = {batch["collections"] for batch in host["batches"][way]}
        rows.append([label, f"{host['median_tokens_per_s'][way]:,.0f}", f"{collections:,}"])
    ratio = host["median_tokens_per_s"]["sampler"] / host["median_tokens_per_s"]["neither"]
    rows.append(["the sampler's way over the former", f"{ratio:.2f}x", ""])
    return markdown(["the sampler's host side, 1,024 responses of ≤ 768 tokens (`benchmarks/sampler_host.py`)",
                     "tok/s", "garbage collections a batch"], rows)


def grid_table() -> list[str]:
    return script("benchmarks/results/h200_scale/grid.py").grid_rows(RESULTS)


# --- RL arms (§4c) ---

ALGOS = {"pg": "IS-PG", "grpo": "GRPO", "grpo-tis": "GRPO-TIS", "grpo-icepop": "GRPO-IcePop",
         "grpo-geo-mask": "GRPO geometric mask", "gspo": "GSPO"}
HELD_OUT_STEPS = (50, 100, 150, 200)
TO_200_STEPS = ("first", "logp", "k3", "seq_kl", "first_last", "held_out_200", "skipped")
LONG = ("steps", "best", "windows", "weights", "logp", "k3", "seq_kl")
DTYPE_ORDER = ("fp16", "fp32", "bf16")


def arms(*folders: str) -> dict[str, list[dict]]:
    return script("experiments/h200/arms_report.py").load_arms([RESULTS / f for f in folders])


def arm_label(name: str) -> tuple[tuple, str, str]:
    """("pg-fp16-s0") → its place in a table (dtype, then algorithm), its label ("IS-PG fp16 s0") and dtype."""
    match = NAME.match(name)
    algo, dtype = match.group("algo", "dtype")
    rest = name[len(f"{algo}-{dtype}-"):]
    return (DTYPE_ORDER.index(dtype), list(ALGOS).index(algo), rest), f"{ALGOS[algo]} {dtype} {rest}", dtype


def held_out(values: dict, steps) -> str:
    return " / ".join(fmt(values.get(s), ".2f") for s in steps)


def samples_per_prompt(rows: list[dict]) -> str:
    keys = {key for r in rows for key in r if key.startswith("eval/counting/avg@")}
    return "/".join(sorted(key.rsplit("@", 1)[1] for key in keys)) or "–"


ARM_COLUMNS: dict[str, tuple[str, Callable[[dict, list[dict], str], str]]] = {
    "steps": ("steps", lambda s, *_: str(s["steps"])),
    "first": ("first step to 0.9", lambda s, *_: fmt(s["first_step"], "d")),
    "best": ("best 10-step mean (from step)", lambda s, *_: f"{s['best'][0]:.2f} ({s['best'][1]})"),
    "windows": ("10-step means at 41 / 61 / 91",
                lambda s, *_: " / ".join(fmt(s["windows"][w], ".2f") for w in (41, 61, 91))),
    "weights": ("per-step mean sequence weight π/μ",
                lambda s, *_: "–".join(f"{w:.2f}" for w in s["weights"]) if s["weights"] else "–"),
    "logp": ("token mean \\|Δlogp\\|", lambda s, *_: f"{s['abs_logp_diff']:.1e}"),
    "k3": ("k3", lambda s, *_: f"{s['k3']:.1e}"),
    "seq_kl": ("seq KL", lambda s, *_: f"{s['seq_kl']:.1e}"),
    "first_last": ("token \\|Δlogp\\|, first / last 20 steps",
                   lambda s, *_: f"{s['abs_logp_diff_first_20']:.1e} / {s['abs_logp_diff_last_20']:.1e}"),
    "held_out_200": ("held-out exact count at 50 / 100 / 150 / 200 (samples per prompt)",
                     lambda s, rows, *_: f"{held_out(s['held_out'], HELD_OUT_STEPS)} ({samples_per_prompt(rows)})"),
    "held_out_100": ("held-out exact count at 50 / 100", lambda s, *_: held_out(s["held_out"], (50, 100))),
    "reward_100": ("held-out reward at 50 / 100", lambda s, *_: held_out(s["held_out_reward"], (50, 100))),
    "reward_150": ("held-out reward at 50 / 100 / 150",
                   lambda s, *_: held_out(s["held_out_reward"], (50, 100, 150))),
    "skipped": ("skipped fp16 steps", lambda s, _rows, dtype: f"{s['skipped']:.0f}" if dtype == "fp16" else "–"),
}


def arms_table(folders: tuple[str, ...], columns: tuple[str, ...]) -> Callable[[], list[str]]:
    """One row per arm of ``folders`` (arms_report.py's figures), ``columns`` named from ARM_COLUMNS."""
    def render() -> list[str]:
        report = script("experiments/h200/arms_report.py")
        found = arms(*folders)
        rows = []
        for name in sorted(found, key=lambda n: arm_label(n)[0]):
            stats, (_, label, dtype) = report.arm_stats(found[name]), arm_label(name)
            rows.append([label, *(ARM_COLUMNS[c][1](stats, found[name], dtype) for c in columns)])
        return markdown(["arm", *(ARM_COLUMNS[c][0] for c in columns)], rows)
    return render


def choices_table(folders: tuple[str, ...], choices: list[tuple[str, tuple[str, ...]]]) -> Callable[[], list[str]]:
    """One row per precision choice: its runs (arms of ``folders`` by name), each run's best and last 10-step mean,
    the range of the runs' token mismatch, each run's seconds a step and the runs' mean weight push."""
    def render() -> list[str]:
        report = script("experiments/h200/arms_report.py")
        found = arms(*folders)
        rows = []
        for label, names in choices:
            stats = [report.arm_stats(found[name]) for name in names]
            train = [[r for r in found[name] if "reward/mean" in r] for name in names]
            gaps = [s["abs_logp_diff"] for s in stats]
            push = [mean_of(t, "perf/time/sync") for t in train]
            rows.append([label, ", ".join(str(s["steps"]) for s in stats),
                         " / ".join(f"{s['best'][0]:.2f}" for s in stats),
                         " / ".join(f"{mean_of(t, 'reward/mean', slice(-10, None)):.2f}" for t in train),
                         "–".join(dict.fromkeys((f"{min(gaps):.1e}", f"{max(gaps):.1e}"))),
                         " / ".join(f"{s['s_per_step']:.1f}" for s in stats), f"{sum(push) / len(push):.2f} s"])
        return markdown(["choice (algorithm)", "runs: steps", "best 10-step mean, each run", "last 10 steps, each run",
                         "token mean \\|Δlogp\\|", "seconds a step, each run", "weight push a step"], rows)
    return render


def steps_to_threshold_table() -> list[str]:
    """Rounds 5–7: each IS-PG and GRPO run's first step to a 10-step mean of 0.9, by dtype."""
    report = script("experiments/h200/arms_report.py")
    firsts: dict[str, list[int]] = {}
    for folder in ("h200_round5", "h200_round5/reference", "h200_round6", "h200_round7"):
        for name, rows in arms(folder).items():
            algo, dtype = NAME.match(name).group("algo", "dtype")
            if algo in ("pg", "grpo"):
                firsts.setdefault(dtype, []).append(report.arm_stats(rows)["first_step"])
    return markdown(["dtype", "IS-PG and GRPO runs, rounds 5–7", "first step to a 10-step mean of 0.9", "median"],
                    [[dtype, str(len(firsts[dtype])), ", ".join(map(str, sorted(firsts[dtype]))),
                      f"{statistics.median(firsts[dtype]):g}"] for dtype in DTYPE_ORDER if dtype in firsts])


def instruments_table(*folders: str) -> Callable[[], list[str]]:
    """instruments.py's rows pooled by dtype, and bf16 over fp16, without the phantom column (all zero)."""
    def render() -> list[str]:
        lines = script("experiments/h200/instruments.py").dtype_rows([RESULTS / f for f in folders])
        return [short_exponents(line.rsplit("|", 2)[0] + "|") for line in lines]
    return render


def length_slope_table(folder: str, arms_of: dict[str, str]) -> Callable[[], list[str]]:
    """Per dtype: the share of steps whose sequence log-ratio fell with response length, and the median slope."""
    def render() -> list[str]:
        found = arms(folder)
        rows = []
        for dtype, name in arms_of.items():
            slopes = [r["mismatch/seq_logratio_slope"] for r in found[name] if "reward/mean" in r]
            share = sum(x < 0 for x in slopes) / len(slopes)
            rows.append([dtype, f"{share:.0%}", f"{statistics.median(slopes):.1e}"])
        return markdown(["dtype", "steps whose ρ fell with response length", "median slope of ρ per token"], rows)
    return render


def collapse_table() -> list[str]:
    """Round 9's bf16 arm before its fall (steps 63–72) and after it (78–107)."""
    rows = [r for r in arms("h200_round9")["pg-bf16-long-s1"] if "reward/mean" in r]

    def mean(key: str, first: int, last: int) -> float:
        return statistics.mean(r[key] for r in rows if first <= r["step"] <= last)
    figures = (("training reward", "reward/mean", ".3f"),
               ("token mean \\|Δlogp\\|", "mismatch/abs_logp_diff_mean", ".1e"),
               ("k3", "mismatch/k3", ".1e"), ("std of ρ", "mismatch/seq_logratio_std", ".1f"),
               ("share of tokens at μ ≥ 0.9", "mismatch/mu/0.9-1/token_frac", ".2f"))
    body = [[label, format(mean(key, 63, 72), spec), format(mean(key, 78, 107), spec)] for label, key, spec in figures]
    return markdown(["IS-PG bf16 long-s1, means of steps", "63–72", "78–107"], body)


def peer_table() -> list[str]:
    saved = read_json("h200_peer_trl/peer_trl.json")
    settings = saved["settings"]
    responses = settings["prompts_per_step"] * settings["num_samples"]
    text = script("benchmarks/peer_trl.py").table(saved["results"], responses)
    return text.splitlines()  # the ratios follow the table after a blank line


def atlas_table(*relatives: str) -> Callable[[], list[str]]:
    """§4f: one row per precision choice of the atlas's lab runs (``relatives``, in order; an arm of a
    batch-invariant run is marked so): the mismatch, the share of tokens with π/μ outside [0.9, 1.1], the sequence
    log-ratio's slope per 1k tokens, and what the choice costs (the sampler's tokens/s, the trainer's scoring)."""
    def render() -> list[str]:
        rows = []
        for relative in relatives:
            for arm, m in labelled_arms(read_json(relative)).items():
                rows.append([arm, sig(m["mismatch/abs_logp_diff_mean"], 3), sig(m["mismatch/k3"], 3),
                             sig(m["mismatch/seq_kl"], 3), sig(m["mismatch/seq_logratio_slope"] * 1000, 2),
                             f"{m['mismatch/ratio_out_of_band'] * 100:.2f}%", k(m["sample_tokens_per_s"]),
                             f"{m['score_s']:.2f} s"])
        return markdown(["arm", "token mean \\|Δlogp\\|", "k3", "seq KL", "slope of ρ per 1k tokens",
                         "π/μ outside [0.9, 1.1]", "sampler tok/s", "trainer scoring"], rows)
    return render


def launcher_table() -> list[str]:
    """§4g: the plain command and the same under torchrun: steps 2–10's mean time and its split (step 1 holds the
    start-up), the peak device memory and the time end to end (NAME.memory), and the step-1 figures."""
    folder, rows = RESULTS / "h200_launcher", []
    for name in ("plain", "torchrun"):
        steps = [json.loads(line) for line in (folder / name / "metrics.jsonl").read_text().splitlines()]
        later = steps[1:]
        peak, wall = re.fullmatch(r"(\d+) MiB peak, (\d+) s", (folder / f"{name}.memory").read_text().strip()).groups()
        parts = [statistics.mean(r[f"perf/time/{part}"] for r in later) for part in ("sample", "score", "update", "sync")]
        rows.append([name, f"{(later[-1]['time/elapsed_s'] - steps[0]['time/elapsed_s']) / len(later):.2f} s",
                     *(f"{t:.2f} s" for t in parts), f"{int(peak) / 1024:.1f} GiB", f"{wall} s",
                     f"{steps[0]['reward/mean']:.4f}", f"{steps[0]['mismatch/abs_logp_diff_mean']:.4e}",
                     f"{steps[0]['train/grad_norm']:.7f}"])
    return markdown(["command", "step (2–10)", "sample", "score", "update", "sync", "peak memory", "end to end",
                     "step-1 reward", "step-1 token \\|Δlogp\\|", "step-1 gradient norm"], rows)


LAB = "h200_mismatch_lab.json"
ROUND7_LAB = "h200_round7/lab-pair/mismatch.json"
TABLES: dict[str, Callable[[], list[str]]] = {
    "atlas-math": atlas_table("h200_atlas/math/mismatch.json", "h200_atlas/math-rest/mismatch.json",
                              "h200_atlas/invariant/mismatch.json"),
    "atlas-counting": atlas_table("h200_atlas/counting/mismatch.json", "h200_atlas/invariant-counting/mismatch.json"),
    "atlas-rl": arms_table(("h200_atlas_rl", "h200_atlas_rl_2", "h200_atlas_rl_9"),
                           ("steps", "best", "windows", "logp", "k3", "seq_kl", "first_last", "reward_150")),
    "atlas-choices": choices_table(
        ("h200_round8", "h200_round9", "h200_round10", "h200_atlas_rl", "h200_atlas_rl_2", "h200_atlas_rl_3",
         "h200_atlas_rl_4", "h200_atlas_rl_5", "h200_atlas_rl_6", "h200_atlas_rl_7", "h200_atlas_rl_9"),
        [("fp16 (IS-PG)", ("pg-fp16-long", "pg-fp16-long-s1", "pg-fp16-long-s2")),
         ("bf16 (IS-PG)", ("pg-bf16-long", "pg-bf16-long-s1", "pg-bf16-long-s2")),
         ("bf16, fp32 head (IS-PG)", ("pg-bf16-fp32head-long", "pg-bf16-fp32head-long-s1")),
         ("fp16 (GRPO)", ("grpo-fp16-long", "grpo-fp16-long-s1")),
         ("bf16 (GRPO)", ("grpo-bf16-long", "grpo-bf16-long-s1")),
         ("fp16, token TIS (GRPO-TIS)", ("grpo-tis-fp16-long", "grpo-tis-fp16-long-s1")),
         ("bf16, token TIS (GRPO-TIS)", ("grpo-tis-bf16-long", "grpo-tis-bf16-long-s1")),
         ("FP8 sampler, token TIS (GRPO-TIS)", ("grpo-tis-bf16-fp8-long", "grpo-tis-bf16-fp8-long-alone")),
         ("FP8 sampler, IcePop [0.5, 5] (GRPO)", ("grpo-icepop-bf16-fp8-long", "grpo-icepop-bf16-fp8-long-s1")),
         ("FP8 sampler, geometric mask [0.99, 1.01] (GRPO)", ("grpo-geo-mask-bf16-fp8-long",))]),
    "algorithms-long": arms_table(("h200_round8", "h200_round9", "h200_round10", "h200_atlas_rl_3", "h200_atlas_rl_4",
                                   "h200_atlas_rl_5", "h200_atlas_rl_6", "h200_atlas_rl_7",
                                   "h200_atlas_rl_8"),
                                  ("steps", "first", "best", "windows", "logp", "k3", "first_last", "reward_150")),
    "launcher": launcher_table,
    "two-gpus": lambda: script("experiments/h200/two_gpus_report.py").agree_table(RESULTS / "h200_two_gpus"),
    "two-gpus-scaling": lambda: script("experiments/h200/two_gpus_report.py").scaling_lines(RESULTS / "h200_two_gpus"),
    "lab": lambda: lab_table(LAB, [
        ("token mean \\|Δ\\|", "mismatch/abs_logp_diff_mean", 3), ("max \\|Δ\\|", "mismatch/abs_logp_diff_max", 2),
        ("std of ρ", "mismatch/seq_logratio_std", 3), ("k3 (per token)", "mismatch/k3", 3),
        ("seq KL[μ‖π]", "mismatch/seq_kl", 3), ("slope of ρ / token", "mismatch/seq_logratio_slope", 2)]),
    "lab-ratios": lambda: lab_ratios(LAB),
    "step-time": step_time_table,
    "arithmetic-t1": arithmetic_table("h200_rl", (0, 1, 2), window=10, threshold=0.4, with_mean=True),
    "arithmetic-other": other_settings_table,
    "arithmetic-fewshot": arithmetic_table("h200_fewshot", (0, 1, 2), window=5, threshold=0.9, with_mean=False),
    "round4": round4_table,
    "round4-lab": lambda: lab_table("h200_round4/lab_builtin_hf/mismatch.json", [
        ("token mean \\|Δ\\|", "mismatch/abs_logp_diff_mean", 3), ("std of ρ", "mismatch/seq_logratio_std", 3),
        ("k3", "mismatch/k3", 3), ("sequence KL", "mismatch/seq_kl", 3),
        ("trainer vs itself: micro-batch 64 vs 16", "trainer/microbatch_gap_abs_mean", 2),
        ("no-grad scoring vs update path", "trainer/update_path_gap_abs_mean", 2)]),
    "round4-lab-ratios": lambda: lab_ratios("h200_round4/lab_builtin_hf/mismatch.json"),
    "round5-arms": arms_table(("h200_round5", "h200_round5/reference"),
                              ("steps", "first", "logp", "k3", "seq_kl", "held_out_200", "skipped")),
    "round5-instruments": instruments_table("h200_round5", "h200_round5/reference"),
    "round6-arms": arms_table(("h200_round6",), TO_200_STEPS),
    "round7-arms": arms_table(("h200_round7",), TO_200_STEPS),
    "round7-lab": lambda: lab_table(ROUND7_LAB, [
        ("token mean \\|Δlogp\\|", "mismatch/abs_logp_diff_mean", 3), ("std of ρ", "mismatch/seq_logratio_std", 3),
        ("k3", "mismatch/k3", 3), ("sequence KL", "mismatch/seq_kl", 3),
        ("\\|Δ\\| at μ < 0.1", "mismatch/mu/0-0.1/abs_logp_diff_mean", 2),
        ("\\|Δ\\| at μ ≥ 0.9", "mismatch/mu/0.9-1/abs_logp_diff_mean", 2),
        ("\\|Δ\\| at positions 0–16", "mismatch/position/0-16/abs_logp_diff_mean", 2),
        ("\\|Δ\\| at positions 256–1024", "mismatch/position/256-1024/abs_logp_diff_mean", 2)]),
    "round7-lab-ratios": lambda: lab_ratios(ROUND7_LAB),
    "round7-speed": round7_speed_table,
    "round8-arms": arms_table(("h200_round8",), (*LONG, "held_out_100", "skipped")),
    "round8-slopes": length_slope_table("h200_round8", {"bf16": "pg-bf16-long", "fp16": "pg-fp16-long"}),
    "round9-arms": arms_table(("h200_round9",), (*LONG, "reward_100", "skipped")),
    "round9-collapse": collapse_table,
    "round9-slopes": length_slope_table("h200_round9", {"bf16": "pg-bf16-long-s1", "fp16": "pg-fp16-long-s1"}),
    "round10-arms": arms_table(("h200_round10",), (*LONG, "reward_150", "skipped")),
    "round10-slopes": length_slope_table("h200_round10", {"bf16": "pg-bf16-long-s2", "fp16": "pg-fp16-long-s2"}),
    "rounds5-7-steps-to-0.9": steps_to_threshold_table,
    "scale-loops": loop_table("SmolLM2, counting, GRPO fp16, ≤ 768 tokens", [
        ("before the scale work (53f1609), 8 × 4", "h200_scale/before-53f1609-loop-8x4.metrics.jsonl"),
        ("first run, 8 × 4", "h200_scale/loop-8x4"), ("first run, 128 × 8", "h200_scale/loop-128x8"),
        ("sixth run, 128 × 8", "h200_scale_6/loop-128x8-1024")]),
    "scale2-loops": loop_table("SmolLM2, counting, GRPO fp16", [
        ("8 × 4, `--vllm-kv-cache-gb 2`", "h200_scale_2/loop-8x4"),
        ("128 × 8, `--vllm-kv-cache-gb 30`", "h200_scale_2/loop-128x8"),
        ("128 × 8 tuned: `--vllm-max-num-seqs 512 --micro-batch-tokens 53248`", "h200_scale_2/loop-128x8-tuned")]),
    "scale3-cells": cell_table("the 1.5B shape (1.78B, untied), 64 responses, fp16, checkpointing", [
        ("8,192 tokens", "h200_scale_3/ladder-8k.json"), ("4,096 tokens", "h200_scale_3/ladder-4k.json")]),
    "scale3-loops": loop_table("SmolLM2, counting, GRPO fp16, 8 × 4", [
        ("before the scale work (53f1609)", "h200_scale/before-53f1609-loop-8x4.metrics.jsonl"),
        ("`--vllm-kv-cache-gb 2`", "h200_scale_3/loop-8x4"),
        ("the cache the utilization leaves (~40 GiB)", "h200_scale_3/loop-8x4-util")]),
    "scale4-loops": loop_table("SmolLM2, counting, GRPO fp16, 128 × 8, ≤ 768 tokens", [
        ("a seed per row, π_old rescored", "h200_scale_4/loop-128x8-tuned"),
        ("`--no-vllm-row-seeds --no-rescore`", "h200_scale_4/loop-128x8-fast")]),
    "scale4-cells": cell_table("the 1.5B shape, 64 responses of 4,096 tokens, fp16", [
        ("gradient checkpointing (third run)", "h200_scale_3/ladder-4k.json"),
        ("no checkpointing", "h200_scale_4/ladder-4k-no-ckpt.json")]),
    "scale4-ratio": lambda: ladder_ratio_table("h200_scale_4/ladder-ratio.json", "fourth run"),
    "scale5-cells": cell_table("the 1.5B shape, 64 responses of 4,096 tokens, fp16, no checkpointing", [
        ("`--compile-layers`", "h200_scale_5/ladder-4k-compiled.json"),
        ("eager", "h200_scale_5/ladder-4k-no-ckpt.json")]),
    "scale5-loops": loop_table("SmolLM2, 128 × 8, `--no-vllm-row-seeds --no-rescore`", [
        ("fourth run (padding mask, memory-efficient attention)", "h200_scale_4/loop-128x8-fast"),
        ("fifth run (no mask for right-padded rows, flash attention)", "h200_scale_5/loop-128x8-fast")]),
    "scale6-loops": loop_table("SmolLM2, 128 × 8, `--no-vllm-row-seeds --no-rescore`", [
        ("fifth run (512 sequences at once, update eager)", "h200_scale_5/loop-128x8-fast"),
        ("sixth run (1,024 sequences with CUDA graphs, flat log-probs, collector paused, `--compile-layers`)",
         "h200_scale_6/loop-128x8-1024")]),
    "scale6-sampler-host": sampler_host_table,
    "scale6-cells": cell_table("grid cell, 64 responses run to the limit, fp16, checkpointing", [
        (f"{label} × {n:,}", f"h200_scale_6/ladder-{model}-{n}.json")
        for label, model, lengths in (("SmolLM2-135M", "smollm2-135m", (1024, 4096, 8192)),
                                      ("Qwen2.5-0.5B", "qwen2.5-0.5b", (1024,))) for n in lengths]),
    "scale7-ratio": ratio_table,
    "scale8-profile": profile_table,
    "scale8-cells": cell_table("Qwen2.5-3B, 64 responses, fp16, checkpointing", [
        (f"{n:,} tokens", f"h200_scale_8/ladder-qwen2.5-3b-{n}.json") for n in (1024, 4096, 8192)]),
    "scale8-compiled": cell_table("the 1.5B shape, 4,096 tokens, no checkpointing, `--compile-layers`", [
        ("fifth run (log-softmax eager)", "h200_scale_5/ladder-4k-compiled.json"),
        ("eighth run (log-softmax compiled)", "h200_scale_8/ladder-4k-compiled.json")]),
    "grid": grid_table,
    "peer-trl": peer_table,
}


def render(page: str, tables: dict[str, Callable[[], list[str]]] = TABLES) -> tuple[str, list[str]]:
    """The page with every marked table rewritten, and the names of the tables that changed."""
    lines, out, changed = page.split("\n"), [], []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        match = MARKER.match(lines[i])
        i += 1
        if not match:
            continue
        name, indent = match["name"], match["indent"]
        if name not in tables:
            raise SystemExit(f"docs/results.md names a table '{name}' that benchmarks/results_tables.py does not "
                             f"render; add it to TABLES or fix the marker")
        end = f"{indent}<!-- /table: {name} -->"
        try:
            close = lines.index(end, i)
        except ValueError:
            raise SystemExit(f"docs/results.md: table '{name}' has no closing '{end.strip()}'; add it after the table")
        fresh = [f"{indent}{line}".rstrip() for line in tables[name]()]
        if fresh != lines[i:close]:
            changed.append(name)
        out.extend(fresh)
        i = close
    return "\n".join(out), changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is not its files'")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page whose marked tables to write")
    args = parser.parse_args(argv)
    text, changed = render(args.page.read_text())
    if args.check:
        if changed:
            print(f"{args.page}: out of date with benchmarks/results: {', '.join(changed)}; "
                  f"run python benchmarks/results_tables.py")
            return 1
        return 0
    args.page.write_text(text)
    print(f"{args.page}: rewrote {len(changed)} table(s){': ' + ', '.join(changed) if changed else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
