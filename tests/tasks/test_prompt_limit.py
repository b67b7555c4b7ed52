"""The prompt limit: prompts over --max-prompt-length refused, or with --drop-long-prompts left out and counted."""

import copy
import json

import pytest

from precision_oat.backends.local.driver import train
from precision_oat.errors import UserError
from precision_oat.rl.actor import PrecisionActor, encode_prompt
from precision_oat.tasks.math import MathTask
from precision_oat.tasks.prompt_limit import PromptLimit
from tests.backends.helpers import make_args
from tests.conftest import byte_tokenizer


def math_task(tmp_path, questions):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"problem": q, "answer": "1"}) + "\n" for q in questions))
    return MathTask(train_path=str(data), train_split=None, eval_benchmarks=["aime"], eval_limit=3)


def limited(task, limit, drop):
    lines, tokenizer = [], byte_tokenizer()
    return PromptLimit(task, lambda e: len(encode_prompt(task, tokenizer, e)), limit, drop, log=lines.append), lines


def test_prompts_over_the_limit_are_refused_naming_the_way_out(tmp_path):
    # Byte tokens: the template "no" renders the question as it is, so a prompt's length is its question's.
    task, _ = limited(math_task(tmp_path, ["1+0", "12345678+1", "2+0"]), 8, drop=False)
    with pytest.raises(UserError, match=r"^--max-prompt-length 8: 1 of 3 training prompts are longer \(longest 10 "
                                        r"tokens\); raise the limit, filter the data or pass --drop-long-prompts$"):
        task.train_set()


def test_dropping_keeps_the_short_prompts_in_order_and_says_how_many_went(tmp_path):
    task, lines = limited(math_task(tmp_path, ["1+0", "12345678+1", "2+0", "123456789+1"]), 8,
                          drop=True)
    assert [e.question for e in task.train_set()] == ["1+0", "2+0"]
    assert lines == ["--drop-long-prompts: left out 2 of 4 training prompts longer than --max-prompt-length 8 "
                     "tokens (longest 11)"]
    task.train_set()
    assert len(lines) == 1  # checked once


def test_the_evaluation_sets_are_held_to_the_limit_when_asked_for(tmp_path):
    inner = math_task(tmp_path, ["1+0"])
    longest = max(len(encode_prompt(inner, byte_tokenizer(), e)) for e in inner.eval_sets()["aime"])
    task, lines = limited(inner, longest - 1, drop=True)
    kept = task.eval_sets()["aime"]
    assert 0 < len(kept) < 3 and all(e in inner.eval_sets()["aime"] for e in kept)
    assert lines[0].startswith(f"--drop-long-prompts: left out {3 - len(kept)} of 3 aime evaluation prompts ")
    # The evaluation sets are checked only when asked for: the training set alone passes a limit they exceed.
    task, _ = limited(inner, 3, drop=False)
    assert len(task.train_set()) == 1


def test_a_set_with_nothing_left_is_refused(tmp_path):
    task, _ = limited(math_task(tmp_path, ["12345678+1"]), 8, drop=True)
    with pytest.raises(UserError, match=r"^--max-prompt-length 8: all 1 training prompts are longer \(shortest 10 "
                                        r"tokens\); raise the limit$"):
        task.train_set()


def test_everything_but_the_sets_is_the_tasks_own(tmp_path):
    inner = math_task(tmp_path, ["1+0"])
    task, _ = limited(inner, 64, drop=True)
    example = task.train_set()[0]
    assert task.name == inner.name and task.stop_strings == inner.stop_strings
    assert task.render(example) == inner.render(example)
    assert task.rewards(["\\boxed{1}", "\\boxed{2}"], [example, example], [False, False]) == [1.0, 0.0]
    assert task.grade(["\\boxed{1}"], [example], [True]) == inner.grade(["\\boxed{1}"], [example], [True])


def test_a_run_with_drop_long_prompts_trains_on_the_prompts_that_fit(tmp_path, byte_model_dir, capsys):
    data = tmp_path / "prompts.jsonl"
    questions = [f"{i}+1" for i in range(4)] + [f"{i:030d}+1" for i in range(2)]
    data.write_text("".join(json.dumps({"problem": q, "answer": "1"}) + "\n" for q in questions))
    common = dict(model=str(byte_model_dir), task="math", prompt_data=str(data), prompts_per_step=2, num_samples=2,
                  max_new_tokens=4, max_prompt_length=16, steps=2)
    with pytest.raises(UserError, match="--max-prompt-length 16: 2 of 6 training prompts are longer"):
        train(make_args(**common, output_dir=str(tmp_path / "refused")))
    train(make_args(**common, drop_long_prompts=True, output_dir=str(tmp_path / "out")))
    console = capsys.readouterr().out
    assert ("--drop-long-prompts: left out 2 of 6 training prompts longer than --max-prompt-length 16 tokens "
            "(longest 32)") in console
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "step" in r][-1] == 2


class PrefixingActor(PrecisionActor):
    """Renders every prompt with a preamble of its own, which makes the short prompts of the test long."""

    def encode(self, example):
        question = example.question
        return self.tokenizer(("Think step by step. " if question.startswith("0") else "") + question,
                              add_special_tokens=False).input_ids


def test_an_actor_that_renders_prompts_its_own_way_is_held_to_the_limit_as_it_renders_them(tmp_path, byte_model_dir,
                                                                                            capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+1", "answer": "1"}) + "\n" for i in range(4)))
    common = dict(model=str(byte_model_dir), task="math", prompt_data=str(data), prompts_per_step=2, num_samples=2,
                  max_new_tokens=4, max_prompt_length=16, steps=1)
    with pytest.raises(UserError, match="--max-prompt-length 16: 1 of 4 prompts as the actor renders them are longer "
                                        r"\(longest 23 tokens\)"):
        train(make_args(**common, output_dir=str(tmp_path / "refused")), actor_class=PrefixingActor)
    train(make_args(**common, drop_long_prompts=True, output_dir=str(tmp_path / "out")), actor_class=PrefixingActor)
    assert "left out 1 of 4 prompts as the actor renders them" in capsys.readouterr().out


def test_a_copy_of_the_limited_task_is_a_whole_task(tmp_path):
    task, _ = limited(math_task(tmp_path, ["1+0", "123456789+1"]), 8, drop=True)
    for twin in (copy.copy(task), copy.deepcopy(task)):
        assert [e.question for e in twin.train_set()] == ["1+0"]
