"""Runs, checkpoints and resume through the real command line: nothing is lost, no garbage is accepted.

Every case is ``python -m precision_oat.main`` in a subprocess on the embedded policy, with
tiny settings (4 prompts × 2 samples, 4 new tokens). The commands that only need a copy of
one finished two-step run start together; the SIGTERM case runs on its own.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from precision_oat.errors import UserError
from precision_oat.runs.lock import RunLock

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
TINY = ("--prompts-per-step", "4", "--num-samples", "2", "--max-new-tokens", "4", "--probe-dtypes", "--log-every", "1")


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error: ")]


def launch(model: Path, folder: Path, *flags: str, wandb: str = "disabled") -> subprocess.Popen:
    argv = [sys.executable, "-m", "precision_oat.main", "--model", str(model), "--output-dir", str(folder),
            "--wandb-mode", wandb, *TINY, *flags]
    return subprocess.Popen(argv, cwd=folder.parent, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen) -> Outcome:
    out, err = proc.communicate(timeout=300)
    return Outcome(proc.returncode, out, err)


def cli(model: Path, folder: Path, *flags: str, wandb: str = "disabled") -> Outcome:
    return finish(launch(model, folder, *flags, wandb=wandb))


def files(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder``: relative path → (mtime in ns, content hash)."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def checkpoints(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "checkpoints").glob("step_*"))


@pytest.fixture(scope="module")
def model(embedded_policy_dir) -> Path:
    return embedded_policy_dir


@pytest.fixture(scope="module")
def finished_run(model, tmp_path_factory) -> Path:
    """A finished two-step run (checkpoints at steps 1 and 2)."""
    folder = tmp_path_factory.mktemp("finished") / "run"
    result = cli(model, folder, "--steps", "2", "--save-every", "1")
    assert result.returncode == 0, result.stderr
    return folder


def tear_latest(folder: Path) -> None:
    """Cut the newest checkpoint's trainer state in half, as a crash mid-write on a careless filesystem would."""
    torn = folder / "checkpoints" / "step_000002" / "trainer_state.pt"
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])


# Commands on a copy each of the finished run (spoilt first where a function is given), started together.
ON_THE_FINISHED_RUN = {
    "new run": (("--steps", "2"), None),
    "overwrite": (("--steps", "1", "--overwrite"), None),
    "locked": (("--steps", "2", "--overwrite"), None),
    "finished": (("--resume", "--steps", "2"), None),
    "changed flags": (("--resume", "--steps", "2", "--learning-rate", "1e-3", "--dtype", "bf16"), None),
    "safe flags": (("--resume", "--steps", "3", "--save-every", "1", "--log-every", "2", "--keep-checkpoints", "1"), None),
    "torn latest": (("--resume", "--steps", "3", "--save-every", "1"), tear_latest),
}


@pytest.fixture(scope="module")
def on_copies(model, finished_run, tmp_path_factory):
    """case → (outcome, its folder, the folder's files before the command)."""
    started = {}
    for name, (flags, spoil) in ON_THE_FINISHED_RUN.items():
        folder = tmp_path_factory.mktemp(name.replace(" ", "_")) / "run"
        shutil.copytree(finished_run, folder)
        (folder / "notes.txt").write_text("the user's own notes\n")
        if spoil is not None:
            spoil(folder)
        before = files(folder)
        # "locked": this test process holds the folder's lock, as a run in progress would.
        lock = RunLock(folder) if name == "locked" else None
        started[name] = (launch(model, folder, *flags), folder, before, lock)
    results = {}
    for name, (proc, folder, before, lock) in started.items():
        results[name] = (finish(proc), folder, before)
        if lock is not None:
            lock.release()
    return results


def test_a_new_run_refuses_a_folder_that_holds_a_run(on_copies):
    result, folder, before = on_copies["new run"]
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = result.error_lines
    assert f"--output-dir {folder} already holds a run" in line
    assert "--resume" in line and "--overwrite" in line and "metrics.jsonl with 2 rows" in line
    assert files(folder) == before


def test_overwrite_deletes_the_old_run_but_not_other_files(on_copies):
    result, folder, before = on_copies["overwrite"]
    assert result.returncode == 0, result.stderr
    assert [r["step"] for r in rows(folder)] == [1]
    assert checkpoints(folder) == ["step_000001"]
    assert json.loads((folder / "config.json").read_text())["steps"] == 1
    assert (folder / "notes.txt").read_text() == "the user's own notes\n"


def test_a_second_run_in_a_locked_folder_stops_at_once(on_copies):
    result, folder, before = on_copies["locked"]
    assert result.returncode != 0
    (line,) = result.error_lines
    assert "another run is writing there" in line and "run.lock" in line
    # Even --overwrite deletes nothing while the folder is locked.
    assert files(folder) == before


def test_the_lock_dies_with_its_process(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from precision_oat.runs.lock import RunLock; lock = RunLock(Path(sys.argv[1])); "
                               "print('held', flush=True); time.sleep(60)", str(tmp_path)],
                              env=ENV, text=True, stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(UserError, match="another run is writing there"):
        RunLock(tmp_path)
    holder.kill()  # SIGKILL: no cleanup runs
    holder.wait()
    with RunLock(tmp_path):
        pass


def test_resume_of_a_finished_run_touches_nothing(on_copies):
    result, folder, before = on_copies["finished"]
    assert result.returncode == 0, result.stderr
    assert "is finished (step 2 of --steps 2" in result.stdout
    assert files(folder) == before


def test_resume_refuses_flags_that_change_the_run_naming_old_and_new_values(on_copies):
    result, folder, before = on_copies["changed flags"]
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = result.error_lines
    assert "--learning-rate 0.001 (the run has 0.0005)" in line
    assert "--dtype bf16 (the run has fp16)" in line
    assert files(folder) == before


def test_resume_records_safe_flags_extends_the_run_and_prunes_checkpoints(on_copies):
    result, folder, before = on_copies["safe flags"]
    assert result.returncode == 0, result.stderr
    config = json.loads((folder / "config.json").read_text())
    assert config["steps"] == 2 and config["log_every"] == 1  # the original values stay
    assert config["resumes"] == [{"step": 2, "changed": {"steps": [2, 3], "log_every": [1, 2],
                                                          "keep_checkpoints": [3, 1]}}]
    history = rows(folder)
    assert [r["step"] for r in history] == [1, 2, 3]
    assert checkpoints(folder) == ["step_000003"]
    # The summary covers the whole run, not only the resumed part.
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["steps"] == 3
    assert summary["reward_first"] == history[0]["reward/mean"]
    assert summary["mismatch/k3"] == pytest.approx(sum(r["mismatch/k3"] for r in history) / 3, rel=1e-12)


def test_a_torn_latest_checkpoint_falls_back_to_the_one_before(on_copies):
    result, folder, before = on_copies["torn latest"]
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "step_000002 is unreadable" in warnings[0], result.stderr
    assert "step_000001 at step 1" in result.stdout
    assert [r["step"] for r in rows(folder)] == [1, 2, 3]
    assert json.loads((folder / "config.json").read_text())["resumes"] == [{"step": 1, "changed": {"steps": [2, 3]}}]
    # The rewritten checkpoints load without unpickling code.
    assert torch.load(folder / "checkpoints" / "step_000002" / "trainer_state.pt", weights_only=True)["step"] == 2


def test_sigterm_in_a_folder_named_with_colon_and_hash_saves_and_resume_completes(model, tmp_path):
    """SIGTERM mid-run saves at the step boundary; the resume ends the run, in the same wandb run where wandb exists."""
    wandb = "offline" if importlib.util.find_spec("wandb") else "disabled"
    folder = tmp_path / "dtype:fp16#seed 0"
    proc = launch(model, folder, "--steps", "500", wandb=wandb)
    for line in proc.stdout:
        if line.startswith("step    1/500"):
            break
    proc.send_signal(signal.SIGTERM)
    result = finish(proc)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    stopped = len(rows(folder))
    assert 1 <= stopped < 500
    assert f"SIGTERM: saved a checkpoint at step {stopped}" in result.stdout
    assert checkpoints(folder)[-1] == f"step_{stopped:06d}"

    resumed = cli(model, folder, "--resume", "--steps", str(stopped + 1), wandb=wandb)
    assert resumed.returncode == 0, resumed.stderr
    assert [r["step"] for r in rows(folder)] == list(range(1, stopped + 2))
    assert json.loads((folder / "summary.json").read_text())["steps"] == stopped + 1
    config = json.loads((folder / "config.json").read_text())
    assert config["resumes"] == [{"step": stopped, "changed": {"steps": [500, stopped + 1]}}]
    if wandb == "offline":
        ids = {p.name.rsplit("-", 1)[1] for p in (folder / "wandb").glob("offline-run-*")}
        assert len(ids) == 1, sorted(p.name for p in (folder / "wandb").iterdir())
