"""The fault kind of an ``env_error``, counted per kind on the dashboard (`rollout.figures`), in eval's
summary (``env_error_kinds``) and by the chaos bench: an infrastructure failure is removed from training,
and which fault removed it is what a user needs to see."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["env_error_kind"]

_ERROR_TYPE = re.compile(
    r"\b([A-Z][A-Za-z]*(?:Error|Lost|Unavailable|Failed|NotFound|Missing|Exception|Timeout|Unreachable))\b"
)


def env_error_kind(reason: Any) -> str:
    """The fault kind of an ``env_error``: where it struck and the typed error the code raised, as in
    ``agent/FleetUnavailable`` (the node went down under the agent), ``grading/LeaseLost`` (the grading
    container died) or ``policy/PolicyUnreachable`` (the model's endpoint did not answer); ``<stage>/unknown`` when the reason names no error type. The reasons are the ones
    our own code builds (``[grading container: ]<ErrorType>: <message>``), so the figure is per fault,
    not per message."""
    text = str(reason or "")
    if text.startswith("env_error:"):
        text = text[len("env_error:") :].lstrip()
    stage = "grading" if text.startswith("grading container") else "agent"
    found = _ERROR_TYPE.search(text)
    if found and found.group(1).startswith("Policy"):  # the policy's endpoint, not the fleet
        stage = "policy"
    return f"{stage}/{found.group(1) if found else 'unknown'}"
