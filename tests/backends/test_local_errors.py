"""Bad input fails with one clear error before any training."""

import json
import math
import signal

import pytest
import torch

from precision_oat.args import RolloutArgs
from precision_oat.backends.local.driver import train
from precision_oat.errors import UserError
from precision_oat.rl.actor import PrecisionActor
from precision_oat.runs.folder import start_new_run
from precision_oat.samplers.kv_cache import KVCacheSampler
from precision_oat.tasks.arithmetic import ArithmeticTask, char_tokenizer
from tests.conftest import tiny_model
from tests.backends.helpers import make_args


def test_unknown_model_path(tmp_path):
    with pytest.raises(ValueError, match="--model .*no such folder"):
        train(make_args(model=str(tmp_path / "missing"), output_dir=str(tmp_path / "out")))


def test_prompt_longer_than_the_limit(tmp_path, embedded_policy_dir):
    with pytest.raises(ValueError, match="--max-prompt-length 3: .* longer"):
        train(make_args(model=str(embedded_policy_dir), max_prompt_length=3, output_dir=str(tmp_path)))


def test_conflicting_flags(tmp_path):
    with pytest.raises(ValueError, match="--prompt-data applies to --task math"):
        train(make_args(prompt_data="data/train/math_1k5", output_dir=str(tmp_path)))


def test_dataset_without_the_named_column(tmp_path, embedded_policy_dir):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match="--input-key"):
        train(make_args(model=str(embedded_policy_dir), task="math", prompt_data=str(data), output_dir=str(tmp_path / "o")))


def test_resume_without_a_run_or_without_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="--resume: .* holds no precision-oat run"):
        train(make_args(resume=True, output_dir=str(tmp_path)))
    start_new_run(tmp_path, make_args(output_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="--resume: no checkpoint"):
        train(make_args(resume=True, output_dir=str(tmp_path)))


class NaNTask(ArithmeticTask):
    def rewards(self, responses, examples, truncated):
        return [math.nan for _ in responses]


def test_reward_function_returning_nan():
    tokenizer = char_tokenizer()
    actor = PrecisionActor(KVCacheSampler(tiny_model(vocab=len(tokenizer)), torch.float32), NaNTask(), tokenizer,
                           RolloutArgs(num_samples=2, max_new_tokens=4), seed=0)
    with pytest.raises(ValueError, match="non-finite reward nan"):
        actor.rollout(NaNTask().train_set()[:2], step=0)


class FailingSync(KVCacheSampler):
    """A sampler whose weight sync fails, as a bug in the caller's own sampler would."""

    def load_weights(self, weights):
        raise RuntimeError("the sync failed")


def test_the_callers_signal_handlers_are_back_after_train_raises(tmp_path, embedded_policy_dir, monkeypatch):
    from precision_oat.backends.local import driver

    def build(policy, precision, device, rollout, seed, **_):
        return FailingSync(policy.model, precision.sampler_dtype, device, policy.tokenizer.pad_token_id)

    def callers_handler(number, frame):
        pass

    monkeypatch.setattr(driver, "build_sampler", build)
    previous = signal.signal(signal.SIGINT, callers_handler)
    try:
        with pytest.raises(RuntimeError, match="the sync failed"):
            train(make_args(model=str(embedded_policy_dir), steps=1, output_dir=str(tmp_path)))
        assert signal.getsignal(signal.SIGINT) is callers_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_deepspeed_refuses_low_precision_masters_before_writing_anything(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(UserError, match=r"^test: --master-dtype bf16: DeepSpeed \(--learner deepspeed\) keeps fp32 "
                                        r"master weights; use --master-dtype fp32, or --learner builtin"):
        train(make_args(learner="deepspeed", dtype="bf16", master_dtype="bf16", output_dir=str(out)))
    assert not out.exists()


def test_deepspeed_fp16_on_cpu_is_refused_naming_the_flag_before_writing_anything(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("fp16 DeepSpeed runs where CUDA is")
    out = tmp_path / "run"
    with pytest.raises(UserError, match=r"^--trainer-dtype fp16: --learner deepspeed needs a CUDA device"):
        train(make_args(learner="deepspeed", dtype="bf16", trainer_dtype="fp16", master_dtype="fp32",
                        output_dir=str(out)))
    assert not out.exists()


def test_a_folder_whose_run_stopped_before_its_first_step_takes_the_corrected_command(tmp_path, embedded_policy_dir):
    out = tmp_path / "run"
    # A prompt over the limit is found before the folder is claimed.
    with pytest.raises(UserError, match="--max-prompt-length 3"):
        train(make_args(model=str(embedded_policy_dir), max_prompt_length=3, steps=1, output_dir=str(out)))
    assert not out.exists()
    # What a run that stopped later before its first step leaves (a refused fp16 preflight, say): its claim.
    out.mkdir()
    start_new_run(out, make_args(model=str(embedded_policy_dir), max_prompt_length=3, steps=1, output_dir=str(out)))
    summary = train(make_args(model=str(embedded_policy_dir), steps=1, output_dir=str(out)))
    assert summary["steps"] == 1
    assert json.loads((out / "config.json").read_text())["max_prompt_length"] == 512


def test_a_folder_whose_run_finished_a_step_is_still_refused(tmp_path, embedded_policy_dir):
    out = tmp_path / "run"
    train(make_args(model=str(embedded_policy_dir), steps=1, save_every=None, output_dir=str(out)))
    (out / "summary.json").unlink()
    with pytest.raises(UserError, match="already holds a run"):
        train(make_args(model=str(embedded_policy_dir), steps=1, output_dir=str(out)))


def test_a_vllm_tensor_parallel_size_the_processes_cannot_take_is_refused_before_writing_anything(tmp_path, monkeypatch):
    # What torchrun tells each of its processes.
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    with pytest.raises(UserError, match=r"^--vllm-tensor-parallel-size 3 does not divide the 2 processes \(WORLD_SIZE\); "):
        train(make_args(sampler="vllm", learner="deepspeed", dtype="bf16", vllm_tensor_parallel_size=3,
                        output_dir=str(out)))
    with pytest.raises(UserError, match=r"^--vllm-tensor-parallel-size 2 needs --sampler vllm$"):
        train(make_args(learner="deepspeed", dtype="bf16", vllm_tensor_parallel_size=2, output_dir=str(out)))
    assert not out.exists()


OUT_OF_MEMORY = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.8 GiB"


def raise_out_of_memory(*_, **__):
    raise torch.cuda.OutOfMemoryError(OUT_OF_MEMORY)


def test_out_of_memory_in_the_learner_update_names_the_flags_to_lower():
    from precision_oat.backends.local.driver import build_learner
    from precision_oat.rl.settings import learner_settings
    from precision_oat.errors import UserError
    from precision_oat.rl.rollout import collate
    from precision_oat.samplers.sampler import SamplingParams

    model = tiny_model()
    completions = KVCacheSampler(model, torch.float32).generate([[3, 4, 5]], SamplingParams(n=2, max_new_tokens=4))
    rollout = collate(completions, [0.0, 1.0], 2, pad_token_id=0)
    args = make_args(num_samples=2)
    learner = build_learner(model, learner_settings(args, torch.device("cpu")))
    # The allocator gives out in the first decoder layer's forward.
    learner.model.model.layers[0].register_forward_hook(raise_out_of_memory)
    with pytest.raises(UserError) as caught:
        learner.update(rollout, step=0)
    message = str(caught.value)
    assert "\n" not in message and "learner's forward/backward" in message and "Tried to allocate 2.00 GiB" in message
    for flag in ("--micro-batch-size", "--micro-batch-tokens", "--gradient-checkpointing", "--max-new-tokens",
                 "--vllm-gpu-memory-utilization"):
        assert flag in message
    assert isinstance(caught.value.__cause__, torch.cuda.OutOfMemoryError)


def test_out_of_memory_while_the_sampler_starts_names_the_flags_to_lower():
    from precision_oat.errors import UserError
    from precision_oat.models import Policy
    from precision_oat.precision.policy import Precision
    from precision_oat.samplers import build_sampler

    model = tiny_model()
    # The sampler's copy of the weights does not fit on the device.
    model.__class__ = type("OutOfMemoryOnMove", (type(model),), {"to": raise_out_of_memory})
    policy = Policy(model, char_tokenizer(), None)
    with pytest.raises(UserError, match=r"out of GPU memory in the builtin sampler's start .*--vllm-gpu-memory-utilization") \
            as caught:
        build_sampler(policy, Precision.from_flags("fp16"), torch.device("cpu"), RolloutArgs(), seed=0)
    assert isinstance(caught.value.__cause__, torch.cuda.OutOfMemoryError)


def test_vllms_own_out_of_memory_gets_the_device_memory_and_the_flag_to_lower():
    from precision_oat.errors import SAMPLER_WAKE_MEMORY_FLAGS, UserError, out_of_memory_explained

    # vLLM's sleep-mode allocator raises a bare RuntimeError when it cannot map its memory back.
    vllm_error = RuntimeError("CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:163")
    with pytest.raises(UserError) as caught:
        with out_of_memory_explained("vLLM's wake-up (weights) after the update", SAMPLER_WAKE_MEMORY_FLAGS):
            raise vllm_error
    message = str(caught.value)
    assert "\n" not in message and message.startswith("out of GPU memory in vLLM's wake-up (weights) after the update")
    assert "--vllm-kv-cache-gb" in message and "--vllm-gpu-memory-utilization" in message
    assert caught.value.__cause__ is vllm_error
    expected = "GiB free; this process's tensors hold" if torch.cuda.is_available() else "no CUDA device to report on"
    assert expected in message
    # Any other RuntimeError is a bug and keeps its own traceback.
    with pytest.raises(RuntimeError, match="^shape mismatch$"):
        with out_of_memory_explained("vLLM's wake-up (weights) after the update", SAMPLER_WAKE_MEMORY_FLAGS):
            raise RuntimeError("shape mismatch")


def test_evaluation_prompt_longer_than_the_limit(tmp_path, byte_model_dir):
    # Short training prompts fit; AIME's do not: refused before the run starts, not sampled past the limit.
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(4)))
    args = make_args(model=str(byte_model_dir), task="math", prompt_data=str(data), prompts_per_step=2, num_samples=2,
                     max_new_tokens=4, max_prompt_length=16, steps=1, eval_every=1, eval_benchmarks=("aime",),
                     eval_limit=2, eval_samples=2, output_dir=str(tmp_path / "out"))
    with pytest.raises(UserError, match="--max-prompt-length 16: 2 of 2 aime evaluation prompts are longer"):
        train(args)
    assert not (tmp_path / "out" / "metrics.jsonl").exists()
