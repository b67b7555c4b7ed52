"""The counting task: long answers graded exactly (rewards derived by hand)."""

import pytest

from precision_oat.args import EvalArgs, TaskArgs
from precision_oat.errors import UserError
from precision_oat.tasks import build_task
from precision_oat.tasks.base import Example
from precision_oat.tasks.counting import CountingTask, count_reward, longest_increasing

# From 100 to 109: the prompt shows 100-102, the answer is the 7 lines 103..109.
EX = Example("100", "109")
PERFECT = "\n".join(str(n) for n in range(103, 110)) + "\n"


@pytest.mark.parametrize("response,reward", [
    (PERFECT, 1.0),
    # 109 skipped: 6 in order out of 7 expected.
    ("103\n104\n105\n106\n107\n108\n", 6 / 7),
    # Stops after 3: 3 of 7.
    ("103\n104\n105\n", 3 / 7),
    # Writes on to 112: 7 right, but 10 lines.
    (PERFECT + "110\n111\n112\n", 7 / 10),
    # A line of prose among the numbers counts as a line: 7 right out of 8 lines.
    ("103\n104\nand so on\n105\n106\n107\n108\n109", 7 / 8),
    # Out of order: the longest increasing run is 103 105 106 107 108 109 (6) out of 7.
    ("103\n105\n104\n106\n107\n108\n109", 6 / 7),
    ("The numbers are listed above.", 0.0),
    ("", 0.0),
])
def test_reward_by_hand(response, reward):
    assert count_reward(response, EX) == pytest.approx(reward, abs=1e-12)


def test_truncated_responses_get_the_truncated_reward_unless_none():
    task = CountingTask(num_train=4, num_eval=2)
    assert task.score([PERFECT, PERFECT], [EX, EX], [False, True]) == [1.0, 0.0]
    graded = CountingTask(num_train=4, num_eval=2, truncated_reward=None)
    assert graded.score([PERFECT], [EX], [True]) == [1.0]
    assert task.correctness([PERFECT, PERFECT[:-5]], [EX, EX]) == [True, False]


def test_longest_increasing():
    assert longest_increasing([]) == 0
    assert longest_increasing([5, 1, 2, 2, 3, 0, 4]) == 4


def test_prompts_are_long_counts_with_held_out_starts():
    task = CountingTask()
    train, held_out = task.train_set(), task.eval_sets()["counting"]
    assert len(train) == 512 and len(held_out) == 64
    assert not {e.question for e in train} & {e.question for e in held_out}
    for ex in train + held_out:
        count = int(ex.reference) - int(ex.question) + 1
        assert 60 <= count <= 100 and 1000 <= int(ex.question) and int(ex.reference) < 9000
    a = int(train[0].question)
    assert task.render(train[0]) == f"Here are the numbers from {a} to {train[0].reference}, one per line:\n{a}\n{a + 1}\n{a + 2}\n"
    assert [e.question for e in CountingTask().train_set()] == [e.question for e in train]


def test_built_from_the_flags():
    task = build_task(TaskArgs(task="counting", max_train=16), EvalArgs(eval_limit=8))
    assert len(task.train_set()) == 16 and len(task.eval_sets()["counting"]) == 8
    with pytest.raises(UserError, match="--prompt-template chat"):
        build_task(TaskArgs(task="counting", prompt_template="chat"), EvalArgs())
    with pytest.raises(UserError, match="--prompt-data"):
        build_task(TaskArgs(task="counting", prompt_data="x.jsonl"), EvalArgs())
