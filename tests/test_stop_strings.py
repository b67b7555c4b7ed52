"""A response ends at its task's stop string, whatever sampler drew it."""

from precision_oat.samplers.sampler import Completion
from precision_oat.samplers.stop_strings import cut_at_stop_strings
from precision_oat.tasks.math import MathTask
from tests.conftest import byte_tokenizer


def completion(tokenizer, text: str, finished: bool) -> Completion:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return Completion([5, 6], ids, [-0.1 * (i + 1) for i in range(len(ids))], finished, [[i] for i in ids])


def test_a_response_is_cut_after_the_token_that_completes_the_stop_string_and_counts_as_finished():
    tokenizer = byte_tokenizer()
    sampled = completion(tokenizer, " 5 </think> <answer> 5 </answer>\nUser: and 4+4? <answer> 8 </answer>", False)
    cut = cut_at_stop_strings(sampled, tokenizer, ("</answer>",))
    assert tokenizer.decode(cut.response_ids) == " 5 </think> <answer> 5 </answer>"
    n = len(cut.response_ids)
    assert cut.finished and cut.logprobs == sampled.logprobs[:n] and cut.kept_ids == sampled.kept_ids[:n]
    assert cut.prompt_ids == sampled.prompt_ids


def test_a_response_without_a_stop_string_is_left_as_sampled():
    tokenizer = byte_tokenizer()
    sampled = completion(tokenizer, " 5 </think> <answer> 5 </answ", False)
    assert cut_at_stop_strings(sampled, tokenizer, ("</answer>",)) is sampled


def test_the_r1_template_stops_at_the_answer_and_the_others_do_not_stop():
    assert MathTask(template="r1", eval_path=None).stop_strings == ("</answer>",)
    assert MathTask(template="no", eval_path=None).stop_strings == ()


def test_the_actor_cuts_every_sampled_response_at_its_tasks_stop_string():
    import torch

    from precision_oat.args import RolloutArgs
    from precision_oat.rl.actor import PrecisionActor
    from precision_oat.samplers.kv_cache import KVCacheSampler
    from precision_oat.tasks.arithmetic import ArithmeticTask, char_tokenizer
    from tests.conftest import tiny_model

    class StopAtOne(ArithmeticTask):
        stop_strings = ("1",)  # a random policy over digits draws it often

    tokenizer, task = char_tokenizer(), StopAtOne()
    actor = PrecisionActor(KVCacheSampler(tiny_model(vocab=len(tokenizer)), torch.float32), task, tokenizer,
                           RolloutArgs(num_samples=4, max_new_tokens=12), seed=0)
    completions, texts, _, _ = actor.experience(task.train_set()[:4], step=0)
    stopped = [t for t in texts if "1" in t]
    assert stopped, texts
    assert all(t.index("1") == len(t) - 1 for t in stopped), texts
    assert all(c.finished for c, t in zip(completions, texts) if "1" in t)
