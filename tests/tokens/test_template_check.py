"""Our chat template against the tokenizer's own, at the first rollout: refused where the tokens
would change, reported where only the text differs (swe_rl.tokens.template_check)."""

from __future__ import annotations

import copy
import logging
import string
from pathlib import Path
from types import SimpleNamespace

import pytest

from swe_rl.slime import runtime
from swe_rl.slime.config import PluginConfig
from swe_rl.testing.qwen_tokenizer import CHAT_TEMPLATE_PATH
from swe_rl.tokens import ChatRenderer
from swe_rl.tokens.template_check import TemplateMismatch, compare_templates

OTHER_CHATML = (  # ChatML like Qwen's, with another generation prompt: same markers, other text
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
PLAIN = (  # a model whose turns are not marked with Qwen's tokens
    "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}### assistant:{% endif %}"
)


def char_tokenizer(template: str | None) -> object:
    """A tiny real tokenizer (one id per printable character) that has none of Qwen's markers."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(string.printable)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[])))
    tok.chat_template = template
    return tok


@pytest.fixture
def ours() -> ChatRenderer:
    return ChatRenderer.from_file(CHAT_TEMPLATE_PATH)


def test_the_same_template_passes(qwen_tokenizer, ours):
    report = compare_templates(qwen_tokenizer, ours, "qwen3")
    assert report.same and report.note == ""
    assert compare_templates(qwen_tokenizer, ours, "qwen3", enable_thinking=False).same


def test_a_template_that_renders_differently_is_reported(qwen_tokenizer, ours, monkeypatch):
    monkeypatch.setattr(
        qwen_tokenizer, "chat_template", OTHER_CHATML
    )  # the session's tokenizer, for this test
    report = compare_templates(qwen_tokenizer, ours, "qwen3")
    assert not report.same and "renders differently from the tokenizer's own template" in report.note
    assert "at character" in report.note and "swe_chat_template" in report.note


def test_markers_the_tokenizer_does_not_have_are_refused(ours):
    with pytest.raises(TemplateMismatch, match=r"writes <\|im_start\|>, <\|im_end\|>.*swe_chat_template"):
        compare_templates(char_tokenizer(PLAIN), ours, "chat_template_qwen3_thinking.jinja")
    # the model's own template (no markers it lacks) passes
    assert compare_templates(char_tokenizer(PLAIN), ChatRenderer(PLAIN), "plain.jinja").same


def test_a_tokenizer_without_a_template_is_noted(qwen_tokenizer, ours, monkeypatch):
    monkeypatch.setattr(qwen_tokenizer, "chat_template", None)
    report = compare_templates(qwen_tokenizer, ours, "qwen3")
    assert not report.same and "no chat template of its own" in report.note


def plugin_config(tokenizer_dir: Path, template: Path = CHAT_TEMPLATE_PATH) -> PluginConfig:
    args = SimpleNamespace(hf_checkpoint=str(tokenizer_dir), swe_chat_template=str(template))
    return PluginConfig.from_args(args, env={})


@pytest.mark.slow  # saves and loads tokenizers: seconds
async def test_the_plugin_refuses_at_its_first_codec(tmp_path):
    model = tmp_path / "plain-model"
    char_tokenizer(PLAIN).save_pretrained(str(model))  # type: ignore[attr-defined]
    state = runtime.ProcessState(plugin_config(model))
    try:
        with pytest.raises(TemplateMismatch):
            state.codec(plugin_config(model))
        with pytest.raises(TemplateMismatch):  # every rollout, not only the first, until it is fixed
            state.codec(plugin_config(model))
        template = tmp_path / "plain.jinja"
        template.write_text(PLAIN)
        state.codec(plugin_config(model, template))  # the model's own template: accepted
    finally:
        await state.aclose()


@pytest.mark.slow  # saves and loads a Qwen tokenizer: seconds
async def test_the_plugin_warns_once_when_only_the_text_differs(qwen_tokenizer, tmp_path, caplog):
    model = tmp_path / "other-chatml"
    other = copy.deepcopy(qwen_tokenizer)
    other.chat_template = OTHER_CHATML
    other.save_pretrained(str(model))
    state = runtime.ProcessState(plugin_config(model))
    try:
        with caplog.at_level(logging.WARNING, logger="swe_rl"):
            state.codec(plugin_config(model))
            state.codec(plugin_config(model))
    finally:
        await state.aclose()
    warned = [r for r in caplog.records if "renders differently" in r.getMessage()]
    assert len(warned) == 1
