"""benchmarks/weight_sync.py with a real vLLM engine (CPU): every part timed, and the load path reported."""

from transformers import Qwen2Config

from tests.conftest import load_script, save_byte_model


def test_the_sync_benchmark_times_a_vllm_sampler_and_reports_how_it_loads(tmp_path):
    model = save_byte_model(tmp_path / "model", Qwen2Config, hidden_size=128, intermediate_size=256,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=512)
    weight_sync = load_script("benchmarks/weight_sync.py")
    result = weight_sync.main(["--repeats", "2", "--", "--model", str(model), "--sampler", "vllm",
                               "--device", "cpu", "--dtype", "bf16", "--max-new-tokens", "16",
                               "--output-dir", str(tmp_path / "run")])
    assert set(weight_sync.PARTS) <= set(result["median_s"])
    assert all(t > 0 for name in ("export", "push") for t in result["all_s"][name])
    # vLLM-CPU re-packs its linear layers after loading, so its model cannot take weights directly, and
    # there is no second path to time.
    assert result["loads_directly"] is False and set(result["median_s"]) == set(weight_sync.PARTS)
