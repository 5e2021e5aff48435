"""A scripted PRM judge: which reply the fake OpenAI endpoint gives depends on the current step of the prompt.

Shared by tests/rewards/test_prm.py and tests/slime/test_e2e_prm.py.
"""

from __future__ import annotations

import itertools

from swe_rl.testing.fake_openai import ChatReply


def current(body: dict) -> str:
    """The current step's part of the judge prompt."""
    return body["messages"][-1]["content"].split("<current_step")[1]


def scripted_judge(**rules: ChatReply | list[ChatReply]):
    """A callable reply: the first rule whose marker is in the current step decides; lists cycle per marker."""
    cycles = {k: itertools.cycle(v) for k, v in rules.items() if isinstance(v, list)}

    def reply(body: dict) -> ChatReply:
        part = current(body)
        for marker, answer in rules.items():
            if marker in part:
                return next(cycles[marker]) if marker in cycles else answer
        return ChatReply("no rule matched")

    return reply
