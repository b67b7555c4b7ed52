"""Finding runs on disk and grouping the seeds of one experiment.

A run is a folder holding ``metrics.jsonl`` (a run's ``--output-dir``; its ``config.json`` gives the
flags), or a ``NAME.metrics.jsonl`` file, NAME = ALGO-DTYPE[-REST] (``pg-fp16-s0``, ``grpo-bf16-long-s1``),
whose name gives the algorithm, the dtype and the seed (``s<N>``). A folder holding neither stands for
the runs one level below it (a sweep's output root).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from precision_oat.errors import UserError
from precision_oat.runs.log import read_metrics

NAME = re.compile(r"(?P<algo>.+?)-(?P<dtype>fp16|bf16|fp32)(?:-(?P<rest>.+))?")
SEED = re.compile(r"(?:(?P<variant>.+)-)?s(?P<seed>\d+)")
# Flags that do not make another experiment: runs differing only in these are seeds of one group.
NOT_THE_EXPERIMENT = frozenset({
    "seed", "steps", "output_dir", "run_name", "wandb_mode", "wandb_project", "log_every", "save_every", "save_every_minutes",
    "keep_checkpoints", "resume", "overwrite", "resumes", "probe_dtypes", "profile_update", "device", "preset",
    "mismatch_alarm", "mismatch_alarm_action", "export_tokens",
})

# At most this many differing flags name a group in its label.
LABEL_FLAGS = 3


@dataclass
class RunRecord:
    name: str
    # The metrics file.
    path: Path
    rows: list[dict]
    # config.json's values, or for a NAME.metrics.jsonl file what its name says (algo, dtype, seed, variant).
    config: dict

    @property
    def train(self) -> list[dict]:
        """The training rows (an evaluation may sit in a row of its own, without a reward)."""
        return [r for r in self.rows if "reward/mean" in r]

    @property
    def algo(self) -> str:
        return self.config.get("algo", self.name)

    @property
    def dtype(self) -> str:
        """The dtype, or ``sampler/trainer`` when the two sides compute in different ones."""
        contract = self.config.get("precision_contract")
        if contract and contract["sampler"] != contract["trainer_compute"]:
            return f"{contract['sampler']}/{contract['trainer_compute']}"
        return self.config.get("dtype", "?")

    @property
    def correction(self) -> str:
        if self.config.get("correction"):
            return self.config["correction"]
        from precision_oat.algorithms import RECIPES

        recipe = RECIPES.get(self.algo)
        return recipe.correction if recipe else "?"

    @property
    def seed(self) -> Optional[int]:
        return self.config.get("seed")

    @property
    def experiment(self) -> tuple:
        """What the run's seeds share: every flag but the seed and the bookkeeping ones."""
        return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in self.config.items()
                            if k not in NOT_THE_EXPERIMENT))


@dataclass
class Group:
    """The runs of one experiment (its seeds), and how the table and the figures name it."""

    runs: list[RunRecord]
    label: str = ""

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs if r.seed is not None]


def metrics_files(folder: Path) -> dict[str, Path]:
    """NAME → metrics file of the runs directly under ``folder`` (NAME/metrics.jsonl over NAME.metrics.jsonl)."""
    found = {p.name.removesuffix(".metrics.jsonl"): p for p in folder.glob("*.metrics.jsonl")}
    found.update({p.parent.name: p for p in folder.glob("*/metrics.jsonl")})
    return dict(sorted(found.items()))


def read_run(name: str, path: Path) -> RunRecord:
    config_file = path.parent / "config.json"
    if path.name == "metrics.jsonl" and config_file.is_file():
        config = json.loads(config_file.read_text())
    else:
        config = config_from_name(name)
    return RunRecord(name, path, read_metrics(path), config)


def config_from_name(name: str) -> dict:
    """What an ALGO-DTYPE[-REST] name says; REST's trailing ``s<N>`` is the seed, the rest a variant."""
    match = NAME.fullmatch(name)
    if not match:
        return {"variant": name}
    config = {"algo": match["algo"], "dtype": match["dtype"]}
    seed = SEED.fullmatch(match["rest"] or "")
    if seed:
        config["seed"] = int(seed["seed"])
        if seed["variant"]:
            config["variant"] = seed["variant"]
    elif match["rest"]:
        config["variant"] = match["rest"]
    return config


def find_runs(paths: list[Path]) -> list[RunRecord]:
    """The runs that ``paths`` name (run folders, or folders of runs), each once, in the order given."""
    runs: dict[Path, RunRecord] = {}
    for path in paths:
        if (path / "metrics.jsonl").is_file():
            found = {path.name: path / "metrics.jsonl"}
        elif path.is_dir():
            found = metrics_files(path)
        elif path.is_file() and path.name.endswith(".metrics.jsonl"):
            found = {path.name.removesuffix(".metrics.jsonl"): path}
        elif path.is_file() and path.name == "metrics.jsonl":
            found = {path.parent.name: path}
        else:
            found = {}
        if not found:
            what = "does not exist" if not path.exists() else "holds no metrics.jsonl, nor folders that do"
            raise UserError(f"{path} is not a run: it {what}; give a run's --output-dir, or a folder of run folders "
                            "(a sweep's --output-root)")
        for name, file in found.items():
            runs.setdefault(file.resolve(), read_run(name, file))
    for run in runs.values():
        where = run.path.parent if run.path.name == "metrics.jsonl" else run.path
        if not run.train:
            raise UserError(f"{where} has no training step logged yet; compare it once its first step is in "
                            "metrics.jsonl, or leave it out")
        if any("step" not in row for row in run.rows):
            raise UserError(f"{run.path}: a row has no \"step\"; every row of a metrics file needs the step it "
                            "belongs to (as precision-oat's runs write it)")
    return list(runs.values())


def group_runs(runs: list[RunRecord]) -> list[Group]:
    """The runs grouped by experiment (seeds together), labelled ``ALGO DTYPE [variant] [flag=value …]``.

    A flag joins the label when groups of the same algorithm and dtype differ in it (the first few such flags);
    groups that no flag tells apart get their first run's name.
    """
    groups: dict[tuple, Group] = {}
    for run in runs:
        groups.setdefault(run.experiment, Group([])).runs.append(run)
    ordered = sorted(groups.values(), key=lambda g: (g.runs[0].algo, g.runs[0].dtype, g.runs[0].experiment))
    for group in ordered:
        group.runs.sort(key=lambda r: (r.seed is None, r.seed or 0, r.name))
        first = group.runs[0]
        peers = [g.runs[0].config for g in ordered if (g.runs[0].algo, g.runs[0].dtype) == (first.algo, first.dtype)]
        shared = set.intersection(*(set(c) for c in peers)) - NOT_THE_EXPERIMENT - {"variant", "precision_contract"}
        differs = [k for k in sorted(shared) if len({json.dumps(c[k]) for c in peers}) > 1]
        shown = [f"{k}={first.config[k]}" for k in differs[:LABEL_FLAGS]]
        if len(differs) > LABEL_FLAGS:
            shown.append(f"+{len(differs) - LABEL_FLAGS} flags")
        variant = first.config.get("variant")
        if variant == first.algo:  # a name that is not ALGO-DTYPE[-REST] names the run alone
            variant = None
        group.label = " ".join([first.algo, first.dtype, *([variant] if variant else []), *shown])
    for group in ordered:
        if sum(g.label == group.label for g in ordered) > 1:
            group.label += f" ({group.runs[0].name})"
    return ordered
