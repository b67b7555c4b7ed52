"""Checkpoints: a run stopped at step k and resumed ends where an uninterrupted run ends."""

import io
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from precision_oat.args import Args, LoraArgs, unread_flags
from precision_oat.backends.local.driver import train
from precision_oat.errors import UserError
from precision_oat.presets import to_values
from precision_oat.runs.checkpoint import latest_checkpoint
from precision_oat.runs.resume import check_resume
from tests.backends.helpers import make_args


def rows(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_resume_reaches_the_same_state(tmp_path, embedded_policy_dir):
    common = dict(model=str(embedded_policy_dir), algo="grpo", dtype="fp16", learning_rate=5e-3)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(make_args(**common, steps=4, output_dir=str(straight)))
    train(make_args(**common, steps=2, output_dir=str(resumed)))
    assert latest_checkpoint(resumed).name == "step_000002"
    train(make_args(**common, steps=4, output_dir=str(resumed), resume=True))

    a, b = rows(straight), rows(resumed)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        assert ra["reward/mean"] == rb["reward/mean"]
        assert abs(ra["loss/policy"] - rb["loss/policy"]) < 1e-6
        assert ra["train/loss_scale"] == rb["train/loss_scale"]
    final_a = AutoModelForCausalLM.from_pretrained(latest_checkpoint(straight)).state_dict()
    final_b = AutoModelForCausalLM.from_pretrained(latest_checkpoint(resumed)).state_dict()
    for name in final_a:
        torch.testing.assert_close(final_a[name], final_b[name], atol=1e-6, rtol=1e-5)
    state = torch.load(latest_checkpoint(resumed) / "trainer_state.pt", weights_only=True)
    assert state["step"] == 4 and set(state["rng"]) == {"torch", "python", "numpy"}


def test_trainer_state_loads_without_unpickling_code_and_restores_every_rng():
    import random

    import numpy as np

    from precision_oat.runs.checkpoint import rng_states, set_rng_states

    torch.manual_seed(1), random.seed(2), np.random.seed(3)
    np.random.standard_normal()  # numpy now holds a cached gaussian as well
    saved = rng_states()
    expected = (torch.rand(3), random.random(), np.random.standard_normal(2))
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    set_rng_states(torch.load(buffer, weights_only=True))
    assert torch.equal(torch.rand(3), expected[0])
    assert random.random() == expected[1]
    assert np.array_equal(np.random.standard_normal(2), expected[2])


def test_resume_skips_a_checkpoint_without_learner_state_and_a_dangling_latest(tmp_path, embedded_policy_dir, capsys):
    common = dict(model=str(embedded_policy_dir), save_every=1, output_dir=str(tmp_path))
    train(make_args(**common, steps=3))
    (tmp_path / "checkpoints" / "step_000003" / "learner_state.pt").unlink()
    (tmp_path / "checkpoints" / "latest").write_text("step_000009")
    capsys.readouterr()
    train(make_args(**common, steps=4, resume=True))
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2, err
    assert "names step_000009, which is missing" in warnings[0]
    assert "step_000003 is unreadable (FileNotFoundError" in warnings[1]
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3, 4]
    assert json.loads((tmp_path / "config.json").read_text())["resumes"] == [{"step": 2, "changed": {"steps": [3, 4]}}]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step_000004"


def test_a_resume_leaves_no_file_of_the_steps_it_repeats_nor_of_outputs_it_no_longer_makes(tmp_path,
                                                                                         embedded_policy_dir):
    common = dict(model=str(embedded_policy_dir), save_every=2, output_dir=str(tmp_path))
    train(make_args(**common, steps=3, export_tokens=1, profile_update=3, probe_dtypes=["fp32"]))
    assert (tmp_path / "mismatch_probe.json").is_file() and (tmp_path / "profile.json").is_file()
    # Step 3's checkpoint is torn: the resume goes on from step 2 and repeats step 3, with other outputs.
    (tmp_path / "checkpoints" / "step_000003" / "learner_state.pt").unlink()
    summary = train(make_args(**common, steps=4, export_tokens=2, resume=True))
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3, 4]
    # Kept: the files of steps 1-2. Written anew: those of step 4 (--export-tokens 2, the last step's checkpoint).
    assert sorted(p.name for p in (tmp_path / "tokens").iterdir()) == ["step_000001.parquet", "step_000002.parquet",
                                                                       "step_000004.parquet"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_000002", "step_000004"]
    # Step 3 was profiled and the run probed at its old end; the resumed run does neither.
    assert not (tmp_path / "profile.json").exists()
    assert not (tmp_path / "mismatch_probe.json").exists() and "probe" not in summary


def test_a_resume_points_latest_at_its_checkpoint_before_it_saves_again(tmp_path, embedded_policy_dir):
    from precision_oat.runs.resume import drop_superseded

    train(make_args(model=str(embedded_policy_dir), save_every=1, steps=3, output_dir=str(tmp_path)))
    checkpoints = tmp_path / "checkpoints"
    # A resume from step 2 (step 3's checkpoint torn) deletes step 3's, which ``latest`` names.
    drop_superseded(tmp_path, checkpoints / "step_000002")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step_000001", "step_000002"]
    assert (checkpoints / "latest").read_text() == "step_000002"
    assert not (tmp_path / "summary.json").exists()


PLAIN = (torch.Tensor, str, int, float, bool, type(None))


def plain(value) -> bool:
    """True when ``value`` is made of tensors, numbers, strings, None, and dicts / lists / tuples of them."""
    if isinstance(value, dict):
        return all(plain(k) and plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    return isinstance(value, PLAIN)


def test_a_builtin_run_saves_plain_values_and_resumes_loading_only_with_weights_only(tmp_path, embedded_policy_dir,
                                                                                     monkeypatch):
    common = dict(model=str(embedded_policy_dir), dtype="fp16", save_every=1, output_dir=str(tmp_path))
    train(make_args(**common, steps=2))
    saved = sorted((tmp_path / "checkpoints").rglob("*.pt"))
    assert [p.name for p in saved] == ["learner_state.pt", "trainer_state.pt"] * 2
    for path in saved:
        assert plain(torch.load(path, weights_only=True)), path
    # Every torch.load of the resume, the real one, recorded.
    loads, real_load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append((a[0], k.get("weights_only"))) or real_load(*a, **k))
    train(make_args(**common, steps=3, resume=True))
    assert {Path(path).name for path, _ in loads} == {"learner_state.pt", "trainer_state.pt"}
    assert all(weights_only is True for _, weights_only in loads), loads
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3]


def test_a_run_from_before_the_marker_resumes_and_is_marked(tmp_path, embedded_policy_dir):
    from precision_oat.runs.folder import RUN_MARKER

    common = dict(model=str(embedded_policy_dir), output_dir=str(tmp_path))
    train(make_args(**common, steps=1))
    (tmp_path / RUN_MARKER).unlink()  # as a run written before the marker existed
    train(make_args(**common, steps=2, resume=True))
    assert (tmp_path / RUN_MARKER).is_file()
    assert [r["step"] for r in rows(tmp_path)] == [1, 2]


def test_an_extension_stopped_before_its_summary_is_finished_by_the_next_resume(tmp_path, embedded_policy_dir,
                                                                              monkeypatch):
    from precision_oat.backends.local import loop
    from precision_oat.errors import UserError

    common = dict(model=str(embedded_policy_dir), output_dir=str(tmp_path))
    train(make_args(**common, steps=2))
    # Extended to 3 steps, the run saves step 3 and then fails in the end-of-run probe (as out of GPU memory does).
    real_probe = loop.probe_mismatch

    def out_of_memory(*args, **kwargs):
        raise UserError("out of GPU memory in the end-of-run mismatch probe")

    monkeypatch.setattr(loop, "probe_mismatch", out_of_memory)
    with pytest.raises(UserError, match="end-of-run mismatch probe"):
        train(make_args(**common, steps=3, resume=True, probe_dtypes=["fp32"]))
    assert not (tmp_path / "summary.json").exists()  # the first part's, at step 2, went with the resume
    monkeypatch.setattr(loop, "probe_mismatch", real_probe)
    # The resume the error line suggests (the probe off) writes the summary of the 3 steps.
    summary = train(make_args(**common, steps=3, resume=True))
    assert summary["steps"] == 3
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 3


def test_a_resume_may_drop_a_flag_the_run_never_read(tmp_path):
    # A run started before unread flags were refused: --lora-alpha 32 without --lora-rank.
    (tmp_path / "config.json").write_text(json.dumps(to_values(Args(lora=LoraArgs(lora_alpha=32.0)))))
    now = Args()
    assert check_resume(tmp_path, to_values(now), now.train.steps, 1, unread_flags(now)) is None
    with pytest.raises(UserError, match=r"--lora-alpha 16.0 \(the run has 32.0\) would change what the run computes"):
        check_resume(tmp_path, to_values(now), now.train.steps, 1)
    # With a rank the run reads alpha, and changing it is refused.
    (tmp_path / "config.json").write_text(json.dumps(to_values(Args(lora=LoraArgs(lora_rank=2, lora_alpha=32.0)))))
    ranked = Args(lora=LoraArgs(lora_rank=2))
    with pytest.raises(UserError, match=r"--lora-alpha 16.0 \(the run has 32.0\)"):
        check_resume(tmp_path, to_values(ranked), ranked.train.steps, 1, unread_flags(ranked))
