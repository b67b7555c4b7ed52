"""pass@k and the evaluation summary against hand-computed values."""

import pytest

from precision_oat.tasks.evaluation import Sample, default_ks, pass_at_k, summarize


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (4, 1, 1, 0.25),  # c/n
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 3, 0.9),  # 1 - C(3,3)/C(5,3) = 1 - 1/10
        (8, 3, 4, 13 / 14),  # 1 - C(5,4)/C(8,4) = 1 - 5/70
        (4, 0, 4, 0.0),
        (3, 2, 2, 1.0),  # n - c < k: every 2-subset holds a correct one
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_default_ks():
    assert default_ks(1) == [1]
    assert default_ks(4) == [1, 2, 4]
    assert default_ks(6) == [1, 2, 4, 6]


def _samples(*pairs) -> list[Sample]:
    """Untruncated samples whose reward is their exactness, from (correct, length) pairs."""
    return [Sample(ok, length, False, float(ok)) for ok, length in pairs]


def test_summarize_hand_example():
    results = {
        # Two questions, 2 samples each: c = 1 and c = 2.
        "aime": [_samples((True, 10), (False, 30)), _samples((True, 20), (True, 40))],
        # One question, 2 samples: c = 0.
        "math": [_samples((False, 5), (False, 15))],
    }
    metrics = summarize(results)
    assert metrics["eval/aime/avg@2"] == pytest.approx(0.75)  # (1/2 + 2/2) / 2
    assert metrics["eval/aime/pass@1"] == pytest.approx(0.75)
    assert metrics["eval/aime/pass@2"] == pytest.approx(1.0)  # (1 + 1) / 2
    assert metrics["eval/aime/response_length"] == pytest.approx(25.0)
    assert metrics["eval/math/avg@2"] == 0.0 and metrics["eval/math/pass@2"] == 0.0
    assert metrics["eval/math/response_length"] == pytest.approx(10.0)
    assert metrics["eval/average/avg@2"] == pytest.approx(0.375)  # unweighted over benchmarks
    assert metrics["eval/average/pass@2"] == pytest.approx(0.5)
    assert metrics["eval/average/response_length"] == pytest.approx(17.5)


def test_summarize_reports_the_truncated_share_and_the_mean_reward():
    # A dense reward: partial answers score between 0 and 1; the cut ones get the task's truncated reward.
    question = [Sample(False, 8, True, 0.0), Sample(False, 5, False, 0.5), Sample(True, 4, False, 1.0),
                Sample(False, 8, True, 0.0)]
    metrics = summarize({"counting": [question, [Sample(False, 6, False, 0.25)] * 4]})
    assert metrics["eval/counting/truncated_frac"] == pytest.approx(2 / 8)
    assert metrics["eval/counting/reward"] == pytest.approx(2.5 / 8)
    assert metrics["eval/counting/avg@4"] == pytest.approx(1 / 8)
    assert metrics["eval/average/reward"] == metrics["eval/counting/reward"]


def test_summarize_averages_only_shared_keys():
    metrics = summarize({"a": [_samples((True, 1))], "b": [_samples((True, 1), (False, 3))]}, ks=[1, 2])
    assert "eval/b/pass@2" in metrics and "eval/a/pass@2" not in metrics
    assert metrics["eval/average/pass@1"] == pytest.approx(0.75)
    assert "eval/average/pass@2" not in metrics and "eval/average/avg@1" not in metrics


def test_summarize_rejects_ragged_samples():
    with pytest.raises(ValueError, match="same number"):
        summarize({"a": [_samples((True, 1)), _samples((True, 1), (False, 1))]})
