from precision_oat.args import EvalArgs, TaskArgs
from precision_oat.tasks import build_task


def test_eval_limit_caps_the_arithmetic_tasks_held_out_questions():
    assert len(build_task(TaskArgs(), EvalArgs(), None).eval_sets()["addition"]) == 200
    assert len(build_task(TaskArgs(), EvalArgs(eval_limit=7), None).eval_sets()["addition"]) == 7
