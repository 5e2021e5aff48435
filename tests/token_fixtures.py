"""Token fixtures: the real Qwen tokenizer (built offline once per machine) and a chat codec.

Registered for every test by `tests/conftest.py` (`pytest_plugins`): a test names `qwen_tokenizer`
or `codec` as a parameter. The tokenizer directory is cached (`SWE_QWEN_TOKENIZER_DIR`, default
~/.cache/swe-rl/qwen3-tokenizer), so only the first session pays the ~5 s conversion; the loaded
tokenizer is kept once per process (benches load it too).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from swe_rl.testing.qwen_tokenizer import (
    CHAT_TEMPLATE_PATH,
    build_qwen_tokenizer,
    load_qwen_tokenizer,
)
from swe_rl.tokens import ChatCodec, ChatRenderer


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
