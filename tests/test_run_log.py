"""A resumed run's log: metrics.jsonl and wandb both hold the repeated steps, not the rows logged past the checkpoint."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

from precision_oat.runs.log import RunLog

BLOCK = 32 * 1024  # wandb's run files are a log of records in blocks of this size, as LevelDB's


def wandb_records(path: Path):
    """The protobuf records of one offline wandb run file."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, record = 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        record = chunk if kind in (1, 2) else record + chunk  # full or first piece; middle or last ones append
        if kind in (1, 4):
            parsed = wandb_internal_pb2.Record()
            parsed.ParseFromString(record)
            yield parsed


def written_records(part: Path) -> list:
    """The records of an offline run part once wandb's service has written them all (it ends with an exit record)."""
    deadline = time.time() + 60
    while True:
        records = list(wandb_records(next(part.glob("*.wandb"))))
        if records and records[-1].WhichOneof("record_type") == "exit" or time.time() > deadline:
            return records
        time.sleep(0.2)


def wandb_history(output_dir: Path) -> list[tuple[int, float]]:
    """(step, x) of the wandb run as its offline parts will sync: a part rewinds to its branch point (kept), if any."""
    history = []
    for part in sorted((output_dir / "wandb").glob("offline-run-*")):
        for record in written_records(part):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                internal = {i.key: json.loads(i.value_json) for i in record.run.config.update}.get("_wandb", {})
                if "branch_point" in internal:
                    history = [row for row in history if row[0] <= internal["branch_point"]["step"]]
            elif kind == "history":
                values = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
                history.append((record.history.step.num, values["x"]))
    return history


def log_steps(folder: Path, steps: range, resume_step: int | None = None) -> None:
    log = RunLog(folder, {"seed": 0}, wandb_mode="offline", project="test", run_name="run", resume_step=resume_step)
    for step in steps:
        log.log({"step": step, "x": step * (10.0 if resume_step is None else 100.0)}, total_steps=5, echo=False)
    log.close()


def test_a_resume_replaces_the_steps_logged_past_the_checkpoint_in_metrics_and_wandb(tmp_path):
    log_steps(tmp_path, range(1, 5))  # steps 1-4 logged; the last checkpoint holds 2 steps
    log_steps(tmp_path, range(3, 6), resume_step=2)
    jsonl = [(row["step"], row["x"]) for row in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())]
    assert jsonl == [(1, 10.0), (2, 20.0), (3, 300.0), (4, 400.0), (5, 500.0)]
    assert wandb_history(tmp_path) == jsonl
    # Both parts are the same wandb run: folders offline-run-<time>-<run id>[-<n> when <time> repeats].
    assert len({p.name.split("-")[3] for p in (tmp_path / "wandb").glob("offline-run-*")}) == 1


def test_a_part_whose_folder_wandb_numbered_continues_the_same_wandb_run(tmp_path):
    log_steps(tmp_path, range(1, 3))
    part = next((tmp_path / "wandb").glob("offline-run-*"))
    # The name wandb gives a part that starts in the same second as the one before it: "-1" after the id.
    part.rename(part.with_name(part.name + "-1"))
    log_steps(tmp_path, range(3, 4), resume_step=2)
    logs = sorted(p.name for p in (tmp_path / "wandb").glob("offline-run-*/*.wandb"))
    assert logs == [f"run-{part.name.split('-')[3]}.wandb"] * 2, logs


def test_a_resume_reads_back_the_non_finite_values_it_wrote_and_summarizes_them(tmp_path):
    from precision_oat.runs.folder import summarize_run

    log = RunLog(tmp_path, {}, wandb_mode="disabled", project="test", run_name="run")
    for step, k3 in ((1, 1e-4), (2, float("nan")), (3, float("inf"))):
        log.log({"step": step, "reward/mean": 0.5, "mismatch/k3": k3}, total_steps=4, echo=False)
    log.close()
    assert '"mismatch/k3": "nan"' in (tmp_path / "metrics.jsonl").read_text()  # how JSON holds them
    resumed = RunLog(tmp_path, {}, wandb_mode="disabled", project="test", run_name="run", resume_step=3)
    resumed.log({"step": 4, "reward/mean": 0.5, "mismatch/k3": 1e-4}, total_steps=4, echo=False)
    resumed.close()
    assert [type(row["mismatch/k3"]) for row in resumed.history] == [float] * 4
    # The rows kept from before the checkpoint are written back as they were: standard JSON, no bare NaN.
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line, parse_constant=lambda name: name)["mismatch/k3"] for line in lines] == \
        [1e-4, "nan", "inf", 1e-4]
    assert str(summarize_run(resumed.history, tmp_path)["mismatch/k3"]) == "nan"
