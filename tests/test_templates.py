"""Prompt templates render the question in each model's format."""

import pytest

from precision_oat.tasks.templates import TEMPLATE_NAMES, TEMPLATES, apply_template

QUESTION = "What is $\\frac{1}{2} + \\frac{1}{3}$?"


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_template_contains_the_question(name):
    assert QUESTION in apply_template(name, QUESTION)


def test_template_specifics():
    assert apply_template("no", QUESTION) == QUESTION
    assert apply_template("r1_distill_qwen", QUESTION).endswith("<｜Assistant｜><think>\n")
    assert apply_template("r1", QUESTION).endswith("Assistant: <think>")
    assert apply_template("qwen_math", QUESTION).endswith("<|im_start|>assistant\n")
    assert apply_template("qwen3", QUESTION).endswith("<|im_start|>assistant\n")
    assert apply_template("llama3", QUESTION).endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    for name in ("r1_distill_qwen", "qwen_math", "qwen3", "llama3"):
        assert "\\boxed{}" in apply_template(name, QUESTION)
    assert "<answer>" in apply_template("r1", QUESTION)


def test_unknown_template_lists_valid_ones():
    with pytest.raises(ValueError, match="valid templates: r1_distill_qwen, qwen_math, r1, qwen3, llama3, no, chat"):
        apply_template("alpaca", QUESTION)
    assert set(TEMPLATE_NAMES) == set(TEMPLATES) | {"chat"}


def test_chat_template_uses_the_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    prompt = apply_template("chat", QUESTION, tokenizer)
    assert prompt.startswith(f"<user>{QUESTION} Please reason step by step")
    assert prompt.endswith("</user><assistant>")
    with pytest.raises(ValueError, match="needs a tokenizer"):
        apply_template("chat", QUESTION)
