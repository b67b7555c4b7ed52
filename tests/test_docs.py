"""README.md and docs/*.md stay true to the code they describe (docs/concepts.md, metrics.md and runs.md in detail)."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import pytest
import torch

from precision_oat.algorithms import RECIPES, PolicyBatch, build_policy_loss, compose, resolve
from precision_oat.algorithms.registry import TABLES, valid_names
from precision_oat.args import LogArgs, PrecisionArgs
from precision_oat.checks import flag
from precision_oat.precision.mismatch_metrics import mismatch_histograms, mismatch_metrics
from precision_oat.runs.resume import SAFE_ON_RESUME
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
CONCEPTS = (ROOT / "docs" / "concepts.md").read_text()
METRICS = (ROOT / "docs" / "metrics.md").read_text()
RUNS = (ROOT / "docs" / "runs.md").read_text()
PACKAGE = ROOT / "precision_oat"


def _documented(key: str, page: str) -> bool:
    return f"`{key}`" in page


# --- concepts ---


@pytest.mark.parametrize("algo", list(RECIPES))
def test_every_recipe_is_in_the_recipe_table(algo):
    r = RECIPES[algo]
    row = f"| `{algo}` | `{r.advantage}` | `{r.objective}` | `{r.correction}` | `{r.reduction}` |"
    assert row in CONCEPTS, f"docs/concepts.md needs the row starting {row}"


@pytest.mark.parametrize("kind, name", [(kind, name) for kind in TABLES for name in valid_names(kind)])
def test_every_piece_name_is_in_concepts(kind, name):
    assert _documented(name, CONCEPTS), f"docs/concepts.md does not mention the {kind} `{name}`"


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(PrecisionArgs)])
def test_every_precision_flag_is_in_concepts(field):
    assert _documented("--" + field.replace("_", "-"), CONCEPTS)


def test_the_composition_example_is_the_grpo_mis_learner():
    from precision_oat.learners.builtin import PrecisionLearner

    block = re.search(r"```python\n(.*?)```", CONCEPTS, re.S).group(1)
    assert "class L(SeqMISMixin, ClipMixin, DrGRPOMixin, ConstantNormMixin, PrecisionLearner)" in block
    namespace: dict = {}
    exec(block, namespace)
    composed = compose(resolve("grpo-mis", max_gen_length=8), PrecisionLearner)
    assert namespace["L"].__mro__[1:] == composed.__mro__[1:]


# --- metrics ---


def _batch(seed: int = 0) -> PolicyBatch:
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    logprobs = -torch.rand(3, 4, generator=g) - 0.1
    return PolicyBatch(
        logprobs=logprobs.requires_grad_(),
        old_logprobs=logprobs.detach() + 0.05 * torch.randn(3, 4, generator=g),
        sampler_logprobs=logprobs.detach() + 0.5 * torch.randn(3, 4, generator=g),
        advantages=torch.tensor([1.0, -0.5, 0.25]),
        mask=mask,
    )


def test_every_mismatch_metric_is_in_metrics():
    b = _batch()
    keys = mismatch_metrics(b.sampler_logprobs, b.old_logprobs, b.mask)
    assert len(keys) == 13
    missing = [k for k in keys if not _documented(k, METRICS)]
    assert not missing, f"docs/metrics.md lacks {missing}"


def test_every_mismatch_histogram_is_in_metrics():
    b = _batch()
    missing = [k for k in mismatch_histograms(b.sampler_logprobs, b.old_logprobs, b.mask) if not _documented(k, METRICS)]
    assert not missing, f"docs/metrics.md lacks {missing}"


def test_the_table_of_constants_names_the_pieces_that_read_each():
    # docs/concepts.md's "Caps and constants" table against each piece's `reads` (what the refusal of an unread one uses).
    table = CONCEPTS.split("### Caps and constants")[1].split("###")[0]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| `--")]
    checked = 0
    for flags, used_by in rows:
        for field in (f.removeprefix("--").replace("-", "_") for f in re.findall(r"`(--[a-z-]+)`", flags)):
            readers = {n for kind in TABLES for n, cls in TABLES[kind].items() if field in (cls.reads or ())}
            if readers:
                assert set(re.findall(r"`([a-z-]+)`", used_by)) == readers, (field, used_by, readers)
                checked += 1
    assert checked >= 11


@pytest.mark.parametrize(
    "objective, correction", list(itertools.product(TABLES["objective"], TABLES["correction"]))
)
def test_every_loss_statistic_is_in_metrics(objective, correction):
    # Every pair, those resolve() refuses too (pg × token-tis): each piece logs its keys whatever it is paired with.
    spec = dataclasses.replace(resolve("grpo", max_gen_length=4), objective=objective, correction=correction,
                               correction_cap=2.0, is_cap=2.0)
    _, stats = build_policy_loss(spec).policy_loss(_batch())
    missing = [k for k in stats if not _documented(k, METRICS)]
    assert not missing, f"{objective} × {correction} logs {missing}, absent from docs/metrics.md"


def test_every_metric_key_written_by_the_local_backend_is_in_metrics():
    # Literal keys such as "train/loss_scale" in the code that produces the local backend's log.
    sources = [*(PACKAGE / "backends" / "local").glob("*.py"), *(PACKAGE / "learners").glob("*.py"),
               *(PACKAGE / "rl").glob("*.py"), PACKAGE / "runs" / "log.py", *(PACKAGE / "algorithms").rglob("*.py")]
    keys = {k for path in sources for k in re.findall(r"""["']([a-z]+(?:/[a-z0-9_@]+)+)["']""", path.read_text())}
    keys = {k for k in keys if k.split("/")[0] in {"reward", "response", "perf", "train", "loss", "mismatch", "time",
                                                    "eval", "ratio", "precision"}}
    assert {"train/loss_scale", "reward/mean", "perf/train_tokens_per_s", "perf/time/sync"} <= keys  # the scan sees them
    missing = sorted(k for k in keys if not _documented(k, METRICS))
    assert not missing, f"docs/metrics.md lacks {missing}"


# --- runs ---


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(LogArgs)])
def test_every_output_flag_is_in_runs(field):
    assert _documented(flag(field), RUNS), f"docs/runs.md does not list {flag(field)}"


def test_every_flag_a_resume_may_change_is_in_runs():
    section = RUNS[RUNS.index("## Resume"):]
    missing = [flag(name) for name in sorted(SAFE_ON_RESUME) if not _documented(flag(name), section)]
    assert not missing, f"the Resume section of docs/runs.md lacks {missing}"


# --- every page ---

PAGES = {path.name: path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
# Flags of other programs that the pages quote: torchrun's and pip's.
# torchrun's (its rendezvous among them), pip's.
FOREIGN_FLAGS = {"--standalone", "--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-backend", "--rdzv-endpoint",
                 "--rdzv-id", "--no-deps", "--no-build-isolation", "--python-version", "--implementation", "--platform"}


def _flags_of(cls: type) -> set[str]:
    """The flags tyro makes of a flat or grouped args dataclass (groups add no prefix)."""
    names = set()
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            names |= _flags_of(f.default_factory)
            continue
        names.add(flag(f.name))
        if f.type in (bool, "bool"):
            names.add("--no-" + flag(f.name).removeprefix("--"))
    return names


def _our_flags() -> set[str]:
    from precision_oat.args import Args
    from precision_oat.lab.lab import LabArgs
    from precision_oat.lab.preflight.__main__ import PreflightArgs

    benchmarks = (load_script("benchmarks/step_time.py").BenchArgs, load_script("benchmarks/scale_ladder.py").LadderArgs,
                  load_script("benchmarks/peer_trl.py").PeerArgs)
    from precision_oat.compare.__main__ import CompareArgs

    scripts = {f for script in ("experiments/h200/arms_report.py", "experiments/sweep_offline.py")
               for action in load_script(script).command_line()._actions for f in action.option_strings}
    return {"--help"}.union(scripts, *(_flags_of(cls) for cls in (Args, LabArgs, PreflightArgs, CompareArgs,
                                                                  *benchmarks)))


def test_every_flag_the_pages_name_exists():
    ours = _our_flags()
    assert {"--max-new-tokens", "--num-prompts", "--response-tokens", "--no-plots", "--prompt-len"} <= ours
    # Underscored flags are the reference scripts' (docs/presets.md); a flag written with "=" is pip's or a
    # placeholder (--name=value).
    named = {(page, f) for page, text in PAGES.items() for f in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w=-])", text)}
    unknown = sorted((page, f) for page, f in named if f not in ours and f not in FOREIGN_FLAGS)
    assert not unknown, f"flags that no command of ours has: {unknown}"


def _choices_of(cls: type) -> dict[str, set[str]]:
    """The values tyro accepts for each flag of a flat or grouped args dataclass whose type is a Literal (or a tuple or
    Optional of one)."""
    import typing

    def literals(tp) -> set[str]:
        origin = typing.get_origin(tp)
        if origin is typing.Literal:
            return {str(v) for v in typing.get_args(tp)}
        if origin is typing.Annotated:
            return literals(typing.get_args(tp)[0])
        return set().union(*(literals(a) for a in typing.get_args(tp) if a is not Ellipsis)) if origin else set()

    hints = typing.get_type_hints(cls, include_extras=True)
    choices: dict[str, set[str]] = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            for name, values in _choices_of(f.default_factory).items():
                choices.setdefault(name, set()).update(values)
        elif values := literals(hints[f.name]):
            choices.setdefault(flag(f.name), set()).update(values)
    return choices


def test_every_value_the_pages_give_a_flag_of_choices_is_one_it_takes():
    from precision_oat.args import Args
    from precision_oat.lab.lab import LabArgs

    choices = _choices_of(Args)
    for name, values in _choices_of(LabArgs).items():
        choices.setdefault(name, set()).update(values)
    assert {"builtin", "vllm"} <= choices["--sampler"] and "token-tis" in choices["--correction"]
    wrong = []
    for page, text in PAGES.items():
        # A piece the page registers itself (docs/extending.md's example) is a choice once its module is imported.
        own = set(re.findall(r"""@register\(\s*["'][a-z]+["'],\s*["']([\w-]+)["']""", text))
        for name, value in re.findall(r"(--[a-z][a-z0-9-]*)[ =]([a-z0-9][\w.+-]*)", text):
            if name in choices and value not in choices[name] | own:
                wrong.append(f"{page}: {name} {value} (it takes {', '.join(sorted(choices[name]))})")
    assert not wrong, wrong


def test_every_eval_key_the_pages_name_is_logged():
    from precision_oat.tasks.evaluation import Sample, summarize

    logged = summarize({"addition": [[Sample(True, 3, False, 1.0), Sample(False, 5, True, 0.0)]],
                        "counting": [[Sample(True, 2, False, 1.0), Sample(True, 4, False, 1.0)]]})
    placeholders = {"<benchmark>": "[^/]+", "<n>": r"\d+", "<k>": r"\d+", "<metric>": ".+"}
    for page, text in PAGES.items():
        if page == "results.md":  # quotes finished runs by their own benchmarks
            continue
        for key in set(re.findall(r"`(eval/[^`\s]+)`", text)):
            pattern = re.escape(key)
            for name, regex in placeholders.items():
                pattern = pattern.replace(re.escape(name), regex)
            assert any(re.fullmatch(pattern, k) for k in logged), f"{page} names `{key}`, which no evaluation logs"


def test_the_checkpoint_folder_in_runs_is_the_one_the_code_writes():
    from precision_oat.runs.checkpoint import STEP_FOLDER

    names = re.findall(r"`checkpoints/([^/`]+)/`", RUNS)
    assert names, "docs/runs.md names no checkpoint folder"
    for name in names:
        step = STEP_FOLDER.match(name)
        assert step, f"docs/runs.md: checkpoints/{name}/ is not a step folder"
        # write_checkpoint names the folder of step s f"step_{s:06d}".
        assert name == f"step_{int(step.group(1)):06d}", f"docs/runs.md: checkpoints/{name}/ is not six digits"


def test_the_deepspeed_refusals_are_listed_in_concepts():
    from precision_oat.precision.policy import Precision, PrecisionError

    refusals = CONCEPTS[CONCEPTS.index("### Refused combinations"):CONCEPTS.index("### What the policy renders")]
    bullet = next((b for b in refusals.split("\n- ") if "DeepSpeed" in b.split("\n")[0]
                   and "`--backend oat`" in b.split("\n")[0] and "`--learner deepspeed`" in b.split("\n")[0]), None)
    assert bullet, "docs/concepts.md's refusals need a bullet for DeepSpeed, naming --backend oat and --learner deepspeed"
    cases = [dict(dtype="bf16", master_dtype="bf16"), dict(dtype="fp16", growth_factor=3.0),
             dict(dtype="fp16", backoff_factor=0.25), dict(dtype="fp16", initial_scale=1000.0),
             dict(dtype="bf16", loss_scaling="static")]
    for chosen_by in ("--backend oat", "--learner deepspeed"):
        for case in cases:
            with pytest.raises(PrecisionError) as e:
                Precision.from_flags(**case).check_deepspeed(chosen_by)
            named = set(re.findall(r"--[a-z-]+[a-z]", str(e.value))) - {"--backend", "--learner"}
            missing = sorted(f for f in named if f"`{f}`" not in bullet)
            assert not missing, f"the DeepSpeed refusal of {case} names {missing}, absent from its bullet"


def test_every_preset_command_the_pages_show_has_the_flags_its_preset_launches_with():
    shown = 0
    for page, text in PAGES.items():
        for line in text.splitlines():
            command = re.search(r"--preset (args/[\w/]+\.yaml)(.*)", line)
            if not command:
                continue
            header = (ROOT / command.group(1)).read_text()
            launch = re.search(r"^#\s+python -m precision_oat\.main --preset \S+(.*)$", header, re.M).group(1).split()
            flags = command.group(2).split("#")[0].replace("`", " ").split()
            missing = [f for f in launch if f not in flags]
            assert not missing, f"{page}: `{line.strip()}` lacks {missing} (the launch line of {command.group(1)})"
            shown += 1
    assert shown >= 2



def test_the_project_describes_experiments_not_the_machinery_that_lent_the_machines():
    # The GPU commands must run from the repository alone: its own wheel list and scripts, no outside folders.
    phrases = ("shared/gpu", "device machine", "nvidia-h200-x", "HOME/parts", "given back between")
    skipped = {".git", ".venv", "runs", "node_modules"}
    found = [f"{path.relative_to(ROOT)}: {phrase}"
             for path in ROOT.rglob("*") if path.suffix in {".md", ".py", ".sh", ".txt", ".yaml", ".toml", ".cfg"}
             and not skipped & set(path.relative_to(ROOT).parts) and path.is_file() and path.name != "test_docs.py"
             for phrase in phrases if phrase in path.read_text(errors="replace")]
    assert not found, found


def test_every_h200_script_is_in_the_experiments_table():
    # experiments/README.md's table of experiments/h200/, one row per file: a script added there is listed.
    text = (ROOT / "experiments" / "README.md").read_text()
    table = text[text.index("## One H200"):]
    listed = set(re.findall(r"^\| `([\w.]+)` \|", table, re.M))
    held = {p.name for p in (ROOT / "experiments" / "h200").iterdir() if p.suffix in {".py", ".sh"}}
    assert held == listed, f"in experiments/h200/ but not in the table: {sorted(held - listed)}; " \
                           f"in the table but not there: {sorted(listed - held)}"
