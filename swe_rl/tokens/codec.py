"""`ChatCodec`: the chat template's rendering of a conversation's pieces, as token ids.

    codec = ChatCodec(tokenizer, ChatRenderer.from_file(CHAT_TEMPLATE))
    codec.prompt_ids(messages)                                   # system + problem + assistant header
    codec.observation_ids(assistant_msg, new_user_msgs, last_sampled_ids)

An observation is the template's rendering of the new messages plus the next assistant header,
rendered and tokenized on its own. The template must be append-only, and the observation must
start on a special-token boundary so that its ids are what tokenizing the whole conversation would
give; both are checked, and a break is counted (`ChatCodec.prefix_breaks`) rather than hidden.
`ChatRenderer` renders a Jinja2 chat template the way transformers does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatCodec", "ChatRenderer", "PrefixError", "Tokenizer", "load_tokenizer", "split_thinking"]

Message = dict[str, Any]


class Tokenizer(Protocol):
    """What we need of a tokenizer (a transformers fast tokenizer fits)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


class PrefixError(ValueError):
    """The chat template is not append-only: rendering more messages changed the earlier text."""


def split_thinking(text: str) -> tuple[str | None, str]:
    """(reasoning, content) of an assistant text: the ``<think>…</think>`` span is the reasoning
    (also when the template opened it: a lone ``</think>``); None when there is none."""
    if "</think>" not in text:
        return None, text
    before, after = text.split("</think>", 1)
    return before.split("<think>")[-1].strip("\n"), after.lstrip("\n")


# --------------------------------------------------------------------------- rendering


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    # transformers' tojson (no HTML escaping), so both sides render tool schemas alike
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


class ChatRenderer:
    """A Jinja2 chat template rendered the way transformers does (sandboxed, same filters)."""

    def __init__(self, template: str, **defaults: Any) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
        env.filters["tojson"] = _tojson
        self.source = template
        self.template = env.from_string(template)
        self.defaults = defaults

    @classmethod
    def from_file(cls, path: str | Path, **defaults: Any) -> ChatRenderer:
        return cls(Path(path).read_text(encoding="utf-8"), **defaults)

    def render(
        self, messages: Sequence[Message], *, add_generation_prompt: bool = False, **kwargs: Any
    ) -> str:
        return self.template.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            **{**self.defaults, **kwargs},
        )


class ChatCodec:
    """Renders and tokenizes the pieces of a conversation: the prompt, observations, markers."""

    def __init__(self, tokenizer: Tokenizer, renderer: ChatRenderer, **template_kwargs: Any) -> None:
        self.tokenizer = tokenizer
        self.renderer = renderer
        self.template_kwargs = template_kwargs
        self.prefix_breaks = 0
        """Observations whose ids would differ from tokenizing the whole conversation (should stay 0)."""
        probe = [{"role": "user", "content": "x"}]
        bare = self.render(probe)
        self.generation_prompt = self.render(probe, add_generation_prompt=True)[len(bare) :]
        self.header_ids = self.encode(self.generation_prompt)
        """Ids of the next assistant header (``<|im_start|>assistant\\n``); every context ends with them."""
        marker = "\x01"  # what the template wraps around an assistant turn's text
        turn = self.render([{"role": "assistant", "content": marker}])
        self.turn_end = turn.split(marker, 1)[1]
        """Text the template closes an assistant turn with (``<|im_end|>\\n``)."""
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        self.added_ids: frozenset[int] = frozenset(int(i) for i in added)
        self.added_texts: tuple[str, ...] = tuple(str(getattr(t, "content", t)) for t in added.values())
        self._closing_ids = {i for i in self.added_ids if self.turn_end.startswith(self.decode([i]))}

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool = False) -> str:
        return self.renderer.render(
            messages, add_generation_prompt=add_generation_prompt, **self.template_kwargs
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def prompt_ids(self, messages: Sequence[Message], tools: Sequence[Message] | None = None) -> list[int]:
        """The first context: the messages (and the harness's tool schemas, rendered by the template into
        the system turn) and the assistant header."""
        if tools:
            text = self.renderer.render(
                messages, add_generation_prompt=True, **{**self.template_kwargs, "tools": list(tools)}
            )
        else:
            text = self.render(messages, add_generation_prompt=True)
        ids = self.encode(text)
        if ids[-len(self.header_ids) :] != self.header_ids:
            raise PrefixError("the rendered prompt does not end with the assistant header")
        return ids

    def observation_text(
        self, assistant: Message, new_messages: Sequence[Message], last_id: int | None
    ) -> str:
        """Text after a sampled turn: the rest of its closing, the new messages, the next header."""
        prefix = self.render([assistant])
        full = self.render([assistant, *new_messages], add_generation_prompt=True)
        if not full.startswith(prefix):
            raise PrefixError("the chat template rewrote an assistant turn when messages were added after it")
        closing = self.turn_end
        if last_id is not None and last_id in self._closing_ids:  # e.g. the sampled <|im_end|>
            closing = closing[len(self.decode([last_id])) :]
        return closing + full[len(prefix) :]

    def observation_ids(
        self, assistant: Message, new_messages: Sequence[Message], last_ids: Sequence[int]
    ) -> list[int]:
        """Ids of `observation_text`, checked to tokenize the same as within the whole conversation."""
        text = self.observation_text(assistant, new_messages, last_ids[-1] if last_ids else None)
        ids = self.encode(text)
        if not self._boundary_is_stable(last_ids, text, ids):
            self.prefix_breaks += 1
        return ids

    def _boundary_is_stable(self, last_ids: Sequence[int], text: str, ids: list[int]) -> bool:
        if not last_ids or last_ids[-1] in self.added_ids or text.startswith(self.added_texts):
            return True  # BPE never merges across an added token
        window = list(last_ids[-8:])
        return self.encode(self.decode(window) + text) == window + ids

    def marker_ids(self, text: str) -> list[int]:
        """The omission marker as a user message followed by the assistant header."""
        return self.encode(self.render([{"role": "user", "content": text}], add_generation_prompt=True))


_TOKENIZERS: dict[str, Any] = {}


def load_tokenizer(path: str) -> Any:
    """The Hugging Face tokenizer at `path`, loaded once per process (as slime loads it)."""
    if path not in _TOKENIZERS:
        from transformers import AutoTokenizer

        _TOKENIZERS[path] = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    return _TOKENIZERS[path]
