"""A researcher's own learner runs through the library's driver, from Python and from the command line."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from precision_oat.backends.local.driver import imported_class, train
from precision_oat.errors import UserError
from tests.backends.helpers import make_args

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "extending.md").read_text()
MY_LEARNER = PAGE[PAGE.index("# my_learner.py"):].split("```")[0]
README = (ROOT / "README.md").read_text()
README_CLASS = re.search(r"```python\n(from precision_oat.algorithms import .*?)```", README, re.S).group(1)


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "my_learner.py").write_text(MY_LEARNER)
    (folder / "readme_learner.py").write_text(README_CLASS)
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_the_readme_class_runs_two_steps_and_its_override_takes_effect(tmp_path, user_code, embedded_policy_dir):
    from my_learner import MyLearner
    from readme_learner import MyLearner as ReadmeLearner

    assert issubclass(MyLearner, ReadmeLearner.__mro__[1]) and MyLearner.__mro__[1:] == ReadmeLearner.__mro__[1:]
    flags = dict(model=str(embedded_policy_dir), algo="grpo-mis", dtype="fp32", steps=2)
    train(make_args(output_dir=str(tmp_path / "readme"), **flags), learner_class=ReadmeLearner)
    train(make_args(output_dir=str(tmp_path / "mine"), **flags), learner_class=MyLearner)
    readme, mine = rows(tmp_path / "readme"), rows(tmp_path / "mine")
    assert [r["step"] for r in mine] == [1, 2]
    assert (tmp_path / "mine" / "checkpoints" / "step_000002").is_dir()
    # Step 1 samples the same rollout in both runs. Dr.GRPO's advantages r − mean sum to zero in
    # every group, so dropping the negative ones halves their mean absolute value.
    assert readme[0]["reward/mean"] == mine[0]["reward/mean"]
    assert readme[0]["train/advantage_abs_mean"] > 0
    assert mine[0]["train/advantage_abs_mean"] == pytest.approx(readme[0]["train/advantage_abs_mean"] / 2, abs=1e-6)


def test_the_command_line_runs_a_learner_class_named_module_colon_class(tmp_path, user_code, embedded_policy_dir):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "precision_oat.main", "--model", str(embedded_policy_dir), "--algo", "grpo-mis",
         "--dtype", "fp32", "--steps", "1", "--prompts-per-step", "4", "--num-samples", "4", "--max-new-tokens", "4",
         "--wandb-mode", "disabled", "--probe-dtypes", "--learner-class", "my_learner:MyLearner", "--output-dir",
         str(out)],
        cwd=user_code, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(MyLearner)" in done.stdout
    assert json.loads((out / "config.json").read_text())["learner_class"] == "my_learner:MyLearner"
    assert len(rows(out)) == 1


def test_a_learner_class_that_cannot_be_used_is_refused_in_one_line(tmp_path, user_code):
    with pytest.raises(UserError, match=r"^--learner-class nowhere:X: no module 'nowhere' on the path"):
        imported_class("learner_class", "nowhere:X")
    with pytest.raises(UserError, match=r"^--learner-class my_learner:Missing: my_learner has no class 'Missing'"):
        imported_class("learner_class", "my_learner:Missing")
    from my_learner import MyLearner

    with pytest.raises(UserError, match=r"derive it from DeepSpeedLearner"):
        train(make_args(learner="deepspeed", dtype="bf16", output_dir=str(tmp_path / "x")), learner_class=MyLearner)
    assert not (tmp_path / "x").exists()
