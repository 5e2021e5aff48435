"""Our chat template against the tokenizer's own: compared once, at the first rollout of a process.

The plugin renders prompts and observations with ``swe_chat_template`` (Qwen3's thinking template by
default) whatever the model is. With another model that silently trains on a format the model was
never taught. So the first codec of a process renders a probe conversation with both templates:

- the tokenizer does not know a control marker our template writes (``<|im_start|>`` for a model
  whose turns are marked otherwise): the marker would reach the model as several ordinary tokens,
  never as its own turn token. That changes the tokens, so it is refused (`TemplateMismatch`),
  naming ``swe_chat_template``;
- every marker is one of the tokenizer's tokens but the text differs from the tokenizer's own
  template (another system header, other whitespace): reported at start (a warning with the first
  difference), since training then sees a format the model's own template does not produce;
- the tokenizer has no template of its own: nothing to compare (an info line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from swe_rl.tokens.codec import ChatRenderer

__all__ = ["PROBE", "TemplateMismatch", "TemplateReport", "compare_templates"]

PROBE = [
    {"role": "system", "content": "You are a helpful assistant that fixes bugs."},
    {"role": "user", "content": "Fix the failing test in utils.py."},
]
"""A conversation both templates render the same way when they agree (no earlier thinking to keep or drop)."""

_MARKER = re.compile(r"<\|[^<>|\s]{1,40}\|>|</?[a-z_]{2,20}>")


class TemplateMismatch(ValueError):
    """Our chat template writes control markers the tokenizer does not have: the tokens would change."""


@dataclass(frozen=True)
class TemplateReport:
    same: bool
    """Both templates render the probe to the same text."""
    note: str
    """What to tell the user (empty when the same)."""


def _first_difference(ours: str, theirs: str, width: int = 40) -> str:
    i = next(
        (k for k, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs))
    )
    return f"at character {i}: ours {ours[i : i + width]!r}, the tokenizer's {theirs[i : i + width]!r}"


def compare_templates(
    tokenizer: Any, renderer: ChatRenderer, template_name: str, **kwargs: Any
) -> TemplateReport:
    """Raise `TemplateMismatch` when our template's markers are not the tokenizer's tokens; else report
    whether its rendering of `PROBE` equals the tokenizer's own template's (``kwargs``: template variables
    such as ``enable_thinking``, given to both)."""
    ours = renderer.render(PROBE, add_generation_prompt=True, **kwargs)
    unknown = []
    for marker in dict.fromkeys(_MARKER.findall(ours)):
        if len(tokenizer.encode(marker, add_special_tokens=False)) != 1:
            unknown.append(marker)
    if unknown:
        raise TemplateMismatch(
            f"the chat template {template_name} writes {', '.join(unknown)}, which this tokenizer does not "
            "have as a token: the model would see its turn markers as ordinary text. Set "
            "swe_chat_template to a template of this model (e.g. its tokenizer_config.json's "
            "chat_template saved to a .jinja file; it must keep earlier turns' text unchanged)"
        )
    if not getattr(tokenizer, "chat_template", None):
        return TemplateReport(
            False, f"the tokenizer has no chat template of its own; {template_name} is used"
        )
    theirs = tokenizer.apply_chat_template(PROBE, tokenize=False, add_generation_prompt=True, **kwargs)
    if ours == theirs:
        return TemplateReport(True, "")
    return TemplateReport(
        False,
        f"the chat template {template_name} renders differently from the tokenizer's own template "
        f"({_first_difference(ours, theirs)}): training sees a format the model's own template does not "
        "produce; set swe_chat_template to the model's template if that is not intended",
    )
