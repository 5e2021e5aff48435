"""Token fixtures: the real Qwen tokenizer (built offline once per machine) and a chat codec.

Import them by name into a test module (`from token_fixtures import qwen_tokenizer, codec`).
The tokenizer directory is cached (`SWE_QWEN_TOKENIZER_DIR`, default ~/.cache/swe-rl/qwen3-tokenizer),
so only the first session pays the ~5 s conversion. A fixture imported into several modules is a
separate fixture in each (pytest keys session fixtures by where they are defined), so the loaded
tokenizer is also kept here, once per process: loading it costs seconds, not once per test module.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from swe_rl.tokens import ChatCodec, ChatRenderer
from swe_rl.tokens.qwen_tokenizer import (
    CHAT_TEMPLATE_PATH,
    build_qwen_tokenizer,
    load_qwen_tokenizer,
)


@functools.cache
def _built() -> Path:
    return build_qwen_tokenizer()


@functools.cache
def _loaded(path: Path) -> Any:
    return load_qwen_tokenizer(path)


@pytest.fixture(scope="session")
def qwen_tokenizer_dir() -> Path:
    return _built()


@pytest.fixture(scope="session")
def qwen_tokenizer(qwen_tokenizer_dir) -> Any:
    return _loaded(qwen_tokenizer_dir)


@pytest.fixture(scope="session")
def renderer() -> ChatRenderer:
    return ChatRenderer.from_file(CHAT_TEMPLATE_PATH)


@pytest.fixture
def codec(qwen_tokenizer, renderer) -> ChatCodec:
    return ChatCodec(qwen_tokenizer, renderer)
