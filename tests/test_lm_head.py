"""--lm-head-dtype fp32: the final projection and the logits in fp32 on both sides, and its lab arm."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from precision_oat.backends.local.driver import train
from precision_oat.lab.lab import LabArgs, arm_precision, build_trainer, run_lab
from precision_oat.precision.lm_head import use_fp32_head
from precision_oat.precision.policy import Precision
from precision_oat.precision.weight_sync import push_weights
from precision_oat.samplers.kv_cache import KVCacheSampler
from precision_oat.samplers.sampler import SamplingParams
from tests.conftest import save_byte_model, tiny_model
from tests.backends.helpers import make_args


def test_fp32_head_projects_in_fp32_from_the_bf16_weight():
    model = use_fp32_head(tiny_model("llama").to(torch.bfloat16))
    assert model.lm_head.weight.dtype == torch.bfloat16  # the weight stays in the model dtype, as vLLM's does
    ids = torch.tensor([[3, 4, 5, 6]])
    logits = model(input_ids=ids).logits
    assert logits.dtype == torch.float32
    # The fp32 product of the bf16 model's final hidden state and the bf16 weight, both upcast exactly.
    hidden = model.model(input_ids=ids).last_hidden_state
    assert torch.equal(logits, hidden.float() @ model.lm_head.weight.float().T)
    assert not torch.equal(logits, (hidden @ model.lm_head.weight.T).float())  # the bf16 product rounds


def test_fp32_head_of_a_tied_model_upcasts_the_shared_bf16_matrix():
    model = use_fp32_head(tiny_model("qwen2").to(torch.bfloat16))
    assert model.lm_head.weight is model.model.embed_tokens.weight and model.lm_head.weight.dtype == torch.bfloat16
    assert model(input_ids=torch.tensor([[3, 4, 5]])).logits.dtype == torch.float32


def test_fp32_head_arm_computes_the_head_in_fp32_on_both_sides():
    model = tiny_model("llama")
    precision = arm_precision("bf16+fp32head")
    assert (precision.sampler, precision.trainer, precision.lm_head) == ("bf16", "bf16", "fp32")
    sampler = KVCacheSampler(model, precision.sampler_dtype, fp32_head=precision.fp32_head)
    trainer = build_trainer("hf", model, precision, torch.device("cpu"), 8)
    for side in (sampler.model, trainer):
        assert side.lm_head.weight.dtype == torch.bfloat16 and side.model.norm.weight.dtype == torch.bfloat16
    ids = torch.tensor([[3, 4, 5]])
    attention = torch.ones_like(ids)
    sampler_logits, _ = sampler.decoder.forward(ids, torch.arange(3)[None], attention, None)
    assert sampler_logits.dtype == torch.float32
    assert trainer(input_ids=ids).logits.dtype == torch.float32
    out = sampler.generate([[3, 4, 5], [6, 7]], SamplingParams(n=4, max_new_tokens=8, seed=0))
    mu = torch.tensor([lp for c in out for lp in c.logprobs])
    with torch.no_grad():
        pi = torch.cat([trainer(input_ids=torch.tensor([c.prompt_ids + c.response_ids])).logits[0]
                        .log_softmax(-1)[len(c.prompt_ids) - 1 : -1].gather(-1, torch.tensor(c.response_ids)[:, None])
                        .squeeze(-1) for c in out])
    gap = (pi - mu).abs()
    # Sampler and trainer still differ (bf16 everywhere before the head), by a finite amount.
    assert torch.isfinite(gap).all() and 0 < float(gap.mean()) < 0.1


@pytest.fixture(scope="module")
def untied_byte_model(tmp_path_factory):
    """A random tiny Llama with an untied head and the byte tokenizer, saved as an HF folder."""
    return save_byte_model(tmp_path_factory.mktemp("untied"), LlamaConfig, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=512, tie_word_embeddings=False)


def test_lab_measures_bf16_and_bf16_with_an_fp32_head_side_by_side(untied_byte_model, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"problem": f"What is {i} plus {i + 3}?"}) + "\n" for i in range(8)))
    report = run_lab(LabArgs(model=str(untied_byte_model), prompt_data=str(prompts), dtypes=("bf16", "bf16+fp32head"),
                             num_prompts=8, num_samples=4, max_new_tokens=16, device="cpu", plots=False,
                             self_consistency=False, output_dir=tmp_path / "out"), log=lambda *_: None)
    stats = report["dtypes"]
    assert list(stats) == ["bf16", "bf16+fp32head"]
    for arm in stats.values():
        assert all(v is None or v == v for v in arm.values())  # no nan
    head, plain = stats["bf16+fp32head"], stats["bf16"]
    assert 0 < head["mismatch/abs_logp_diff_mean"] < 1 and 0 < plain["mismatch/abs_logp_diff_mean"] < 1
    assert head["mismatch/abs_logp_diff_mean"] != plain["mismatch/abs_logp_diff_mean"]


@pytest.mark.parametrize("learner", ["builtin", "deepspeed"])
def test_bf16_run_with_an_fp32_head_trains_and_syncs_the_bf16_head(tmp_path, embedded_policy_dir, capsys, learner):
    # An untied copy of the embedded policy, so that lm_head.weight is its own tensor on both sides.
    model = AutoModelForCausalLM.from_pretrained(embedded_policy_dir)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    folder = tmp_path / "untied"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(embedded_policy_dir).save_pretrained(folder)
    train(make_args(model=str(folder), dtype="bf16", lm_head_dtype="fp32", steps=2, learning_rate=1e-2,
                    learner=learner, output_dir=str(tmp_path / "run")))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["precision_contract"]["lm_head"] == "fp32 compute from the bf16 weight"
    assert config["precision_contract"]["weight_sync"] == "bf16"
    assert "weight sync bf16 · lm_head fp32 compute from the bf16 weight\n" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(0 < r["mismatch/abs_logp_diff_mean"] < 1 for r in rows)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])  # tied, untied
def test_the_checked_sync_finds_the_fp32_head_sampler_holding_every_weight_in_bf16(kind):
    model = tiny_model(kind)
    precision = Precision.from_flags("bf16", lm_head_dtype="fp32")
    sampler = KVCacheSampler(model, precision.sampler_dtype, fp32_head=True)
    assert {p.dtype for p in sampler.model.parameters()} == {torch.bfloat16}
    # The checked sync casts each master to the sampler dtype and finds the sampler's copy equal.
    assert push_weights(sampler, model.named_parameters(), precision) == len(list(model.parameters()))


def test_bf16_run_with_an_fp32_head_on_a_tied_model_prints_and_records_the_contract(tmp_path, embedded_policy_dir,
                                                                                        capsys):
    train(make_args(model=str(embedded_policy_dir), dtype="bf16", lm_head_dtype="fp32", steps=1,
                    output_dir=str(tmp_path)))
    out = capsys.readouterr().out
    assert ("precision contract: sampler bf16 · trainer compute bf16 · master weights fp32 · weight sync bf16 · "
            "lm_head fp32 compute from the bf16 weight\n") in out
    contract = json.loads((tmp_path / "config.json").read_text())["precision_contract"]
    assert contract["weight_sync"] == "bf16" and contract["lm_head"] == "fp32 compute from the bf16 weight"
