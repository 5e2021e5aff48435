"""The exceptions that steer the agent loop: a turn that does not parse, a policy that cannot go on.

    FormatError       raised by `Harness.parse`: the turn has no action to take; the agent shows the
                      harness's feedback and counts it (exit ``format_errors`` after too many in a row).
    PolicyError       raised by `Policy.act`: the episode ends with exit ``policy_error``, and the
                      error's ``stop_reason`` is kept on the result (`AgentResult.stop_reason`), so a
                      caller learns why without asking the policy:
      ContextExhausted    ``context_exhausted``: the next turn does not fit the context window (truncated).
      PolicyAborted       ``aborted``: the server aborted the request (slime aborting its rollout).
      PolicyUnreachable   ``unreachable``: the policy server could not be reached or kept failing.
      PolicyBadResponse   ``bad_response``: the server refused the request or answered without what is needed.

Any other exception of a policy ends the episode with ``policy_error`` too (``stop_reason`` None).
Environment failures are the fleet client's error tree (`swe_rl.fleet.errors`).
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ContextExhausted",
    "FormatError",
    "PolicyAborted",
    "PolicyBadResponse",
    "PolicyError",
    "PolicyUnreachable",
]


class FormatError(Exception):
    """The assistant turn cannot be turned into actions; `reason` says why, for the feedback."""

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details


class PolicyError(RuntimeError):
    """A policy could not produce its turn; ``stop_reason`` says why, in the words rollout records use."""

    stop_reason: ClassVar[str] = "policy_error"


class ContextExhausted(PolicyError):
    """The next turn does not fit the context window (status truncated)."""

    stop_reason = "context_exhausted"


class PolicyAborted(PolicyError):
    """The server aborted the request (slime aborts outstanding requests at the end of a rollout)."""

    stop_reason = "aborted"


class PolicyUnreachable(PolicyError):
    """The policy server could not be reached or kept failing: an infrastructure failure."""

    stop_reason = "unreachable"


class PolicyBadResponse(PolicyError):
    """The policy server refused the request (4xx) or answered without what the policy needs."""

    stop_reason = "bad_response"
