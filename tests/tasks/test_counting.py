"""The counting task: long answers graded exactly (rewards derived by hand)."""

import pytest

from precision_oat.args import EvalArgs, TaskArgs
from precision_oat.errors import UserError
from precision_oat.tasks import build_task
from precision_oat.tasks.counting import SHOWN, CountingTask, count_reward, longest_increasing
from precision_oat.tasks.task import Example

# From 100 to 119: the prompt shows 100..109 (SHOWN = 10), the answer is the N = 10 lines 110..119.
EX = Example("100", "119")
PERFECT = "".join(f"{n}\n" for n in range(110, 120))


def test_the_prompt_shows_ten_numbers():
    assert SHOWN == 10


@pytest.mark.parametrize("response, reward", [
    (PERFECT, 1.0),
    # No trailing newline, spaces around lines and blank lines change nothing: 10 / max(10, 10).
    ("110\n 111 \n\n112\n113\n114\n115\n116\n117\n118\n119", 1.0),
    # 119 skipped: 9 in order, 9 lines -> 9 / max(10, 9).
    (PERFECT.replace("119\n", ""), 9 / 10),
    # 115 skipped in the middle: the rest still counts, 9 / 10 (a prefix match would give 5 / 10).
    (PERFECT.replace("115\n", ""), 9 / 10),
    # Stops after three numbers: 3 / max(10, 3).
    ("110\n111\n112\n", 3 / 10),
    # Overshoots to 124: 10 right among 15 lines -> 10 / 15.
    (PERFECT + "".join(f"{n}\n" for n in range(120, 125)), 10 / 15),
    # Stops at 119 and then talks: 2 prose lines make 12 lines -> 10 / 12.
    (PERFECT + "\nThese are the numbers.\nDone.", 10 / 12),
    # A prose line inside a short count: 4 right, 5 lines -> 4 / max(10, 5).
    ("110\n111\nand so on\n112\n113\n", 4 / 10),
    # Out of order: the longest increasing run is 110 112 113 ... 119 (9) out of 10 lines.
    ("110\n112\n111\n113\n114\n115\n116\n117\n118\n119\n", 9 / 10),
    # A repeat counts once: 10 right, 11 lines -> 10 / 11.
    (PERFECT.replace("114\n", "114\n114\n"), 10 / 11),
    # Numbers the prompt already showed, or outside the count, earn nothing: 2 right of 10.
    ("108\n109\n110\n111\n", 2 / 10),
    # Decorated numbers are not bare integers: "110." and "111 112" hold none -> 0.
    ("110.\n111 112\n", 0.0),
    # Garbage.
    ("The numbers are listed above.", 0.0),
    ("", 0.0),
])
def test_reward_by_hand(response, reward):
    assert count_reward(response, EX) == pytest.approx(reward, abs=1e-12)


def test_truncated_responses_get_the_truncated_reward_unless_none():
    task = CountingTask(num_train=4, num_eval=2)
    assert task.rewards([PERFECT, PERFECT, "110\n"], [EX, EX, EX], [False, True, True]) == [1.0, 0.0, 0.0]
    assert CountingTask(num_train=4, num_eval=2, truncated_reward=-0.5).rewards([PERFECT], [EX], [True]) == [-0.5]
    graded = CountingTask(num_train=4, num_eval=2, truncated_reward=None)
    assert graded.rewards([PERFECT, "110\n111\n112\n"], [EX, EX], [True, True]) == [1.0, pytest.approx(0.3)]


def test_correct_means_the_whole_count_and_nothing_else():
    task = CountingTask(num_train=4, num_eval=2)
    responses = [PERFECT, PERFECT.replace("115\n", ""), PERFECT + "120\n", PERFECT + "\n"]
    assert task.correctness(responses, [EX] * 4) == [True, False, False, True]


def test_longest_increasing():
    assert longest_increasing([]) == 0
    assert longest_increasing([5, 1, 2, 2, 3, 0, 4]) == 4
    assert longest_increasing([3, 2, 1]) == 1


def test_prompt_is_a_worked_count_of_the_same_length_then_the_first_ten_numbers():
    task = CountingTask(num_train=4, num_eval=2)
    ex = Example("150", "239")
    # Starts span 100..900 (801 of them); the worked example starts 400 further on, wrapping: 550..639.
    worked = "Here are the numbers from 550 to 639, one per line:\n" + "".join(f"{n}\n" for n in range(550, 640))
    count = "Here are the numbers from 150 to 239, one per line:\n" + "".join(f"{n}\n" for n in range(150, 160))
    assert task.render(ex) == worked + "\n" + count
    # 800 + 400 wraps to 100 + (700 + 400) % 801 = 399.
    assert task.render(Example("800", "879")).startswith("Here are the numbers from 399 to 478, one per line:\n399\n")


def test_sets_are_long_counts_with_held_out_starts_and_fixed_by_the_seed():
    task = CountingTask()
    train, held_out = task.train_set(), task.eval_sets()["counting"]
    assert len(train) == 512 and len(held_out) == 64
    assert not {e.question for e in train} & {e.question for e in held_out}
    assert not {task.render(e) for e in train} & {task.render(e) for e in held_out}
    for ex in train + held_out:
        a, b = int(ex.question), int(ex.reference)
        assert 80 <= b - a + 1 <= 100 and 100 <= a and b <= 999
    again = CountingTask()
    assert again.train_set() == train and again.eval_sets() == task.eval_sets()
    assert CountingTask(seed=1).train_set() != train


def test_bad_settings_name_the_input():
    with pytest.raises(UserError, match="--prompt-template fewshot"):
        CountingTask(template="fewshot")
    with pytest.raises(UserError, match="min_count"):
        CountingTask(min_count=10)
    with pytest.raises(UserError, match="distinct starts"):
        CountingTask(num_train=800, num_eval=64)


def test_built_from_the_flags():
    task = build_task(TaskArgs(task="counting", max_train=16), EvalArgs(eval_limit=8))
    assert isinstance(task, CountingTask)
    assert len(task.train_set()) == 16 and len(task.eval_sets()["counting"]) == 8
    assert task.render(task.train_set()[0]).endswith(f"{int(task.train_set()[0].question) + 9}\n")
    default = build_task(TaskArgs(task="counting"), EvalArgs())
    assert len(default.train_set()) == 512 and default.truncated_reward == 0.0
    assert build_task(TaskArgs(task="counting", prompt_template="no", truncated_reward=None), EvalArgs()).truncated_reward is None
    with pytest.raises(UserError, match="--prompt-template chat"):
        build_task(TaskArgs(task="counting", prompt_template="chat"), EvalArgs())
    with pytest.raises(UserError, match="--prompt-data"):
        build_task(TaskArgs(task="counting", prompt_data="x.jsonl"), EvalArgs())


def test_a_response_limit_under_the_shortest_right_answer_is_refused_naming_both_lengths():
    from precision_oat.tasks.arithmetic import char_tokenizer

    task = CountingTask(num_train=4, num_eval=0, seed=1)
    # Character tokens: three digits and a newline a line, and the end-of-sequence token after the last.
    lines = [int(e.reference) - int(e.question) - SHOWN + 1 for e in task.train_set()]
    shortest, longest = 4 * min(lines) + 1, 4 * max(lines) + 1
    with pytest.raises(UserError, match=rf"^--max-new-tokens {shortest - 1}: the counting task's shortest right "
                                        rf"answer is {shortest} tokens .* \(the longest {longest}\).*"
                                        rf"use --max-new-tokens {longest} or more$"):
        task.check_response_limit(char_tokenizer(), shortest - 1)
    task.check_response_limit(char_tokenizer(), shortest)


def test_a_counting_run_with_too_few_new_tokens_stops_before_sampling(tmp_path, embedded_policy_dir):
    from precision_oat.backends.local.driver import train
    from tests.backends.helpers import make_args

    out = tmp_path / "run"
    with pytest.raises(UserError, match=r"^--max-new-tokens 8: the counting task's shortest right answer"):
        train(make_args(model=str(embedded_policy_dir), task="counting", max_new_tokens=8, output_dir=str(out)))
    assert not out.exists()  # refused before the run folder is claimed


def test_count_lengths_sets_how_many_numbers_each_answer_holds():
    task = build_task(TaskArgs(task="counting", count_lengths=(250, 290)), EvalArgs())
    counts = [int(e.reference) - int(e.question) + 1 for e in task.train_set() + task.eval_sets()["counting"]]
    assert len(counts) == 512 + 64 and min(counts) >= 250 and max(counts) <= 290
    assert max(counts) - min(counts) > 30  # spread over the range, not one length
    # 512 + 64 distinct starts among the three-digit numbers leave room for counts up to 325.
    with pytest.raises(UserError, match=r"--count-lengths.*--max-train"):
        build_task(TaskArgs(task="counting", count_lengths=(320, 340)), EvalArgs())
