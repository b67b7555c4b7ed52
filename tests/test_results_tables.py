"""benchmarks/results_tables.py: docs/results.md's tables are those the committed result files give, and the
generator finds and rewrites a stale table between its markers."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import REPO, load_script

tables = load_script("benchmarks/results_tables.py")
summarize = load_script("benchmarks/results/h200_scale/summarize.py")


def test_every_table_of_docs_results_is_what_its_files_give():
    page = (REPO / "docs" / "results.md").read_text()
    text, changed = tables.render(page)
    assert changed == [], f"run python benchmarks/results_tables.py ({', '.join(changed)} out of date)"
    assert text == page
    # Every renderer has its place on the page: none is left to rot unseen.
    assert {m["name"] for m in map(tables.MARKER.match, page.split("\n")) if m} == set(tables.TABLES)


def test_the_results_readme_names_every_table_in_its_tables_column():
    # benchmarks/results/README.md: one row per section, its last column the tables written from that row's files.
    rows = [line for line in (REPO / "benchmarks" / "results" / "README.md").read_text().splitlines()
            if line.startswith("| §") or line.startswith("| vLLM")]
    named = {name for row in rows for name in re.findall(r"`([\w.-]+)`", row.rstrip(" |").split("|")[-1])}
    assert named == set(tables.TABLES), f"not named: {sorted(set(tables.TABLES) - named)}; not tables: {sorted(named - set(tables.TABLES))}"


def test_a_stale_table_is_named_by_check_and_rewritten_without_touching_the_text_around_it(tmp_path, capsys):
    page = tmp_path / "results.md"
    stale = "Before.\n\n  <!-- table: step-time -->\n  | dtype | old |\n  <!-- /table: step-time -->\n\nAfter.\n"
    page.write_text(stale)
    assert tables.main(["--page", str(page), "--check"]) == 1
    assert "step-time" in capsys.readouterr().out
    assert page.read_text() == stale
    assert tables.main(["--page", str(page)]) == 0
    lines = page.read_text().split("\n")
    # h200_step_time.json: fp16 0.37417 s → "374.2 ms"; the table keeps the opening marker's two-space indent.
    assert "  | fp16 | 374.2 ms | 4,094 tok/s |" in lines
    assert lines[0] == "Before." and lines[-2:] == ["After.", ""]
    assert tables.main(["--page", str(page), "--check"]) == 0


@pytest.mark.parametrize("text, message", [
    ("<!-- table: no-such-table -->\n<!-- /table: no-such-table -->\n", "names a table 'no-such-table'"),
    ("<!-- table: grid -->\n| a |\n", "has no closing '<!-- /table: grid -->'"),
])
def test_a_broken_marker_is_refused_in_one_line_naming_it(tmp_path, text, message):
    page = tmp_path / "results.md"
    page.write_text(text)
    with pytest.raises(SystemExit, match=message):
        tables.main(["--page", str(page), "--check"])


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
    stats = summarize.loop_stats(loop)
    assert stats["step_s"] == 3.0  # steps 2 and 3: 2 s sampling + 1 s update each
    assert stats["split"]["update"] == 1.0 and stats["split"]["sample"] == 2.0
    assert stats["tokens"] == 40.0  # 10 tokens × 2 × 2 responses
    assert stats["outside"] == 0.0
