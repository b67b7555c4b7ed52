"""The math oracle on model-style outputs, with real math-verify and a real process pool."""

import time

import pytest

from precision_oat.tasks import grading_pool
from precision_oat.tasks.data import load_eval_suite
from precision_oat.tasks.grading import exact_verdict, extract_answer, last_boxed
from precision_oat.tasks.math import MathGrader, MathTask, grade
from precision_oat.tasks.task import Example

TIMEOUT_S = 3.0


def r1_distill(answer: str) -> str:
    """A response in the R1-Distill format: reasoning, one </think>, a boxed answer."""
    return f"Okay, let me work through this.\nSo the value is {answer}.\n</think>\n\nThe answer is $\\boxed{{{answer}}}$."


@pytest.mark.parametrize(
    "boxed, reference",
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\tfrac{3}{4}", "0.75"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
        ("x=3", "3"),
        ("3", "x = 3"),
        ("[2,5)", "[2, 5)"),
        ("(-\\infty, 1] \\cup [3, \\infty)", "(-\\infty,1]\\cup[3,\\infty)"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("142", "142.0"),
        ("10,\\!100", "10100"),
        # Dollar amounts, as MATH writes them (MATH-500 has three): the currency sign is no math delimiter.
        ("36", "\\$36"),
        ("\\$36", "36"),
        ("18.90", "\\$18.90"),
        ("32,348", "\\$32,\\!348"),
        ("32348", "\\$32,\\!348"),
        ("\\begin{pmatrix}1&0\\\\2018&1\\end{pmatrix}", "\\begin{pmatrix} 1 & 0 \\\\ 2018 & 1 \\end{pmatrix}"),
    ],
)
def test_equivalent_answers_are_correct(boxed, reference):
    assert grade(f"We find ... $\\boxed{{{boxed}}}$", reference)


@pytest.mark.parametrize(
    "boxed, reference",
    [
        ("\\frac{1}{3}", "0.5"),
        ("2\\sqrt{3}", "\\sqrt{8}"),
        ("x=4", "3"),
        ("(2,5]", "[2,5)"),
        ("-3", "3"),
        ("143", "142"),
        ("37", "\\$36"),
    ],
)
def test_different_answers_are_incorrect(boxed, reference):
    assert not grade(f"We find ... $\\boxed{{{boxed}}}$", reference)


SEVENS, EIGHTS = "7" * 2000, "8" * 2000


@pytest.mark.parametrize(
    "boxed, reference",
    [
        ("12345678901234567891", "12345678901234567890"),
        ("-12345678901234567891", "-12345678901234567890"),
        (SEVENS, EIGHTS),
        (SEVENS, SEVENS[:-1] + "8"),
        ("9" * 5000, "9" * 4999 + "8"),  # past Python's int-from-string digit limit
        ("12345678901234567891.0", "12345678901234567890"),
        ("1.2345678901234567891e19", "1.2345678901234567890e19"),
        ("1.2345678901234567891 \\times 10^{19}", "12345678901234567890"),
        ("\\frac{12345678901234567891}{2}", "6172839450617283945"),
        # 31 digits: past decimal's default 28-digit context, so the arithmetic must be exact.
        ("1234567890123456789012345678901/2", "617283945061728394506172839450.6"),
        ("-\\frac{1234567890123456789012345678901}{1}", "-1234567890123456789012345678902"),
    ],
)
def test_distinct_big_numbers_are_incorrect(boxed, reference):
    assert not grade(f"\\boxed{{{boxed}}}", reference)
    assert exact_verdict(boxed, (reference,)) == "incorrect"  # decided without math-verify


@pytest.mark.parametrize(
    "boxed, reference",
    [
        ("12345678901234567890", "12345678901234567890.000"),
        (SEVENS, SEVENS + ".0"),
        ("9" * 5000 + ".0", "9" * 5000),
        ("1234567890123456789012345678901/2", "617283945061728394506172839450.5"),
        ("1.2345678901234567890 \\times 10^{19}", "12345678901234567890"),
    ],
)
def test_equal_big_numbers_are_correct(boxed, reference):
    assert grade(f"\\boxed{{{boxed}}}", reference)


@pytest.mark.parametrize(
    "boxed, reference",
    [
        ("3/4", "6/8"),
        ("0.75", "3/4"),
        ("\\frac{3}{4}", "0.75"),
        ("\\dfrac{6}{8}", "\\frac{3}{4}"),
        ("\\frac12", "0.5"),
        ("-\\frac{1}{2}", "-0.5"),
        ("\\frac{-1}{2}", "-1/2"),
        ("\\frac{1}{-2}", "-0.5"),
        ("\\frac{0.5}{2}", "1/4"),
        ("1.5e3", "1500"),
        ("1.5 \\cdot 10^{-2}", "0.015"),
        ("2 \\times 10^3", "2000"),
        ("007", "7"),
        ("2.50", "2.5"),
        ("+4", "4"),
        ("-0", "0"),
        ("50\\%", "50"),
        ("50\\%", "0.5"),
        ("0.5", "50\\%"),
    ],
)
def test_equal_rationals_are_correct(boxed, reference):
    assert grade(f"\\boxed{{{boxed}}}", reference)
    assert exact_verdict(boxed, (reference,)) == "correct"


@pytest.mark.parametrize(
    "boxed, reference",
    [
        ("0.333333", "\\frac{1}{3}"),  # a rounded decimal is not the exact answer
        ("1/3", "0.3333333333"),
        ("0.1234567", "0.1234568"),  # math-verify alone rounds both to 0.123457
        ("1.0000001", "1"),
        ("3/4", "4/3"),
        ("1.5e3", "150"),
        ("50\\%", "5"),
        ("0.5\\%", "50\\%"),
        ("-\\frac{1}{2}", "\\frac{1}{2}"),
    ],
)
def test_different_rationals_are_incorrect(boxed, reference):
    assert not grade(f"\\boxed{{{boxed}}}", reference)
    assert exact_verdict(boxed, (reference,)) == "incorrect"


def test_non_literals_are_left_to_math_verify():
    assert exact_verdict("x=3", ("3",)) is None
    assert exact_verdict("3", ("\\sqrt{9}",)) is None
    assert exact_verdict("\\frac{1}{0}", ("1",)) is None
    assert exact_verdict("2e", ("5",)) is None  # 2 times Euler's number, not a malformed exponent
    assert grade("\\boxed{3}", "\\sqrt{9}")
    assert grade("\\boxed{x = 12345678901234567890}", "12345678901234567890")
    assert not grade("\\boxed{x = 12345678901234567891}", "12345678901234567890")
    # One literal reference is decided exactly; the other still goes to math-verify.
    assert not grade("\\boxed{0.1234567}", ("0.1234568", "\\frac{1}{8}"))
    assert grade("\\boxed{0.125}", ("0.1234568", "\\frac{1}{8}"))


def test_a_killed_worker_is_replaced():
    assert grade("\\boxed{2\\sqrt{2}}", "\\sqrt{8}")
    for worker in grading_pool._pool.workers:
        worker.process.kill()
    # Each job either meets a dead worker (retried on a fresh one) or a fresh one.
    correct, info = MathGrader().judge_batch(["\\boxed{2\\sqrt{2}}", "\\boxed{\\sqrt{2}}"], ["\\sqrt{8}", "\\sqrt{8}"])
    assert correct == [True, False] and info["errors"] == 0
    assert grade("\\boxed{2\\sqrt{2}}", "\\sqrt{8}")


def test_last_boxed_answer_wins():
    assert grade("First guess \\boxed{4}, but rechecking, \\boxed{5}.", "5")
    assert not grade("First guess \\boxed{5}, but rechecking, \\boxed{4}.", "5")


def test_fbox_and_nested_braces_are_extracted():
    assert last_boxed("so \\fbox{7}") == "7"
    assert last_boxed("\\boxed{\\frac{a^{2}}{b_{1}}} done") == "\\frac{a^{2}}{b_{1}}"
    # A truncated (unbalanced) last box is no answer.
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2") is None


def test_no_answer_is_incorrect():
    assert not grade("The answer is 5.", "5")
    assert not grade("The answer is \\boxed{}.", "5")


def test_r1_distill_counts_only_text_after_exactly_one_think_close():
    assert grade(r1_distill("\\frac{1}{2}"), "0.5", template="r1_distill_qwen")
    # A boxed answer inside the reasoning does not count.
    assert not grade("maybe \\boxed{5}</think> I am not sure.", "5", template="r1_distill_qwen")
    # No </think> at all, or two of them: format failure.
    assert not grade("thinking... \\boxed{5}", "5", template="r1_distill_qwen")
    assert not grade("a</think>b</think> \\boxed{5}", "5", template="r1_distill_qwen")
    # Without the template the same text is graded on its last box.
    assert grade("a</think>b</think> \\boxed{5}", "5")


def test_r1_counts_only_the_answer_tag():
    assert grade("2+3 is 5 </think> <answer> 5 </answer>", "5", template="r1")
    assert grade("work </think> <answer> The answer is \\boxed{\\frac{1}{2}} </answer>", "0.5", template="r1")
    assert not grade("work \\boxed{5} </think> no tags here", "5", template="r1")
    assert not grade("<answer> 5 </answer>", "5", template="r1")  # reasoning never closed
    assert extract_answer("w </think> <answer>7</answer>", "r1") == "7"


def test_any_of_several_references_counts():
    assert grade("\\boxed{0.02}", ("0.01", "0.02"))
    assert not grade("\\boxed{0.03}", ("0.01", "0.02"))


def test_pathological_input_times_out_as_incorrect():
    grader = MathGrader(timeout_s=TIMEOUT_S)
    start = time.monotonic()
    # sympy tries to evaluate this power tower for minutes.
    rewards, info = grader.grade_batch(["\\boxed{9^{9^{9^{9^{9}}}}}", "\\boxed{\\frac{1}{2}}"], ["1", "0.5"])
    elapsed = time.monotonic() - start
    assert rewards == [0.0, 1.0]
    assert info["timeouts"] == 1
    assert elapsed < TIMEOUT_S + 10
    # The pool is usable again afterwards.
    assert grade("\\boxed{2\\sqrt{2}}", "\\sqrt{8}")


def test_truncated_responses_score_truncated_reward_unless_none():
    responses = ["\\boxed{5}", "\\boxed{5}", "\\boxed{4}"]
    references = ["5", "5", "5"]
    truncated = [False, True, False]
    rewards, info = MathGrader(truncated_reward=-1.0).grade_batch(responses, references, truncated)
    assert rewards == [1.0, -1.0, 0.0]
    assert info["truncated"] == 1 and info["correct"] == 1
    rewards, _ = MathGrader(truncated_reward=None, correct_reward=2.0, incorrect_reward=-0.5).grade_batch(
        responses, references, truncated
    )
    assert rewards == [2.0, 2.0, -0.5]


def test_info_counts_missing_answers():
    _, info = MathGrader().grade_batch(["no box", "\\boxed{1}", "also none"], ["1", "1", "1"])
    assert info["no_answer"] == 2 and info["correct"] == 1


def test_every_shipped_reference_grades_correct_when_boxed():
    suite = load_eval_suite("data/evaluation_suite")
    for name, examples in suite.items():
        responses = [r1_distill(e.reference if isinstance(e.reference, str) else e.reference[0]) for e in examples]
        correct, info = MathGrader(template="r1_distill_qwen").judge_batch(responses, [e.reference for e in examples])
        assert all(correct), (name, info)


def test_math_task_renders_and_scores():
    task = MathTask(template="r1_distill_qwen", train_limit=3, eval_benchmarks=["aime"], eval_limit=2)
    train = task.train_set()
    assert len(train) == 3
    assert set(task.eval_sets()) == {"aime"} and len(task.eval_sets()["aime"]) == 2
    prompt = task.render(train[0])
    assert train[0].question in prompt and prompt.endswith("<think>\n")
    example = Example(question="1+1?", reference="2")
    rewards = task.rewards([r1_distill("2"), r1_distill("3"), r1_distill("2")], [example] * 3, [False, False, True])
    assert rewards == [1.0, 0.0, 0.0]
    assert task.last_info["truncated"] == 1


def test_math_task_grades_an_evaluation_as_correctness_and_training_reward():
    task = MathTask(template="r1_distill_qwen", train_limit=1)
    example = Example(question="√8?", reference="2\\sqrt{2}")
    responses = [r1_distill("\\sqrt{8}"), r1_distill("3"), r1_distill("2\\sqrt{2}")]
    truncated = [False, False, True]
    # The cut answer is right, but its reward is the truncated reward, as in training.
    graded = task.grade(responses, [example] * 3, truncated)
    assert graded == ([True, False, True], [1.0, 0.0, 0.0])
    assert graded == (task.correctness(responses, [example] * 3), task.rewards(responses, [example] * 3, truncated))
