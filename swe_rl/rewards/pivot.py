"""The pivot reward: compare the policy's action at a decision point with the expert's.

    expert = ExpertAction.from_any({"tool": "bash", "arguments": {"command": "grep -rn foo src"}})
    parsed = parse_action(turn_text, harness="bash_block")      # or "tool_call", "auto"
    score = compare(parsed.action, expert, PivotRewardConfig())
    score.score, score.category, score.details                  # 1.0, "match", {...}

An action is a tool name and its arguments; a bash block is the tool ``bash`` with
``{"command": ...}``. The comparison, in order (the first failure decides the category):

1. ``no_action``: the turn has no action (no / several bash blocks, no / several tool calls,
   an unreadable tool call);
2. ``wrong_tool``: another tool (names compared case-insensitively, after `tool_aliases`);
3. ``bad_arguments``: arguments that are not a JSON object, a value of the wrong type, a key
   the tool's schema requires missing (or one it does not know), a command that does not lex;
4. ``mismatch``: well-formed but a value differs (or a key is missing / extra);
5. ``match``.

Values are compared by key and type: ``command_keys`` as shell commands (`swe_rl.rewards.shell_norm`:
whitespace, quoting, paths, flag order where safe); ``path_keys`` after path normalization
(working-directory prefix, ``./``); ``text_keys`` (editor old / new strings, file contents,
here-document bodies) as token sequences, whitespace-insensitive, equal when their similarity
reaches ``text_similarity``; other strings after collapsing whitespace; numbers within
``float_tolerance`` (numeric strings accepted); lists element by element; objects key by key.

The reward is binary (``reward_match`` / ``reward_miss``); with ``partial_credit`` > 0 a
mismatch earns ``partial_credit`` × the mean per-key similarity instead.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Self

from swe_rl.harnesses.bash_block import find_bash_blocks, strip_thinking
from swe_rl.rewards.argument_match import BadArguments, compare_arguments

__all__ = [
    "ExpertAction",
    "ParsedAction",
    "PivotCategory",
    "PivotRewardConfig",
    "PivotScore",
    "PolicyAction",
    "ToolAction",
    "compare",
    "parse_action",
    "score_turn",
]


class PivotCategory(str, Enum):
    NO_ACTION = "no_action"
    WRONG_TOOL = "wrong_tool"
    BAD_ARGUMENTS = "bad_arguments"
    MISMATCH = "mismatch"
    MATCH = "match"


class PivotRewardConfig(BaseModel):
    """How strictly actions are compared, and the reward scale."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    workdir: str = "/testbed"
    """Working directory of the episode: its prefix is dropped from paths (a row's own workdir wins)."""
    reward_match: float = 1.0
    """Reward of a matching action."""
    reward_miss: float = 0.0
    """Reward of anything else (no action, wrong tool, bad arguments, mismatch)."""
    partial_credit: float = 0.0
    """0 for a binary reward; else a mismatch earns this × the mean per-key similarity (bad arguments stay 0)."""
    text_similarity: float = 0.9
    """Token-sequence similarity (2 × matched tokens / all tokens, whitespace ignored) at which two texts count
    as equal."""
    float_tolerance: float = 1e-6
    """Numbers closer than this are equal."""
    command_keys: list[str] = Field(default_factory=lambda: ["command", "cmd", "script"])
    """Argument keys holding a shell command (a string, or an argv list like ``["bash", "-lc", "..."]``)."""
    path_keys: list[str] = Field(
        default_factory=lambda: [
            "path",
            "file_path",
            "filepath",
            "filename",
            "file",
            "dir",
            "directory",
            "cwd",
            "workdir",
        ]
    )
    """Argument keys holding a path."""
    text_keys: list[str] = Field(
        default_factory=lambda: [
            "old_str",
            "new_str",
            "file_text",
            "content",
            "old_string",
            "new_string",
            "new_content",
            "insert_text",
            "text",
            "patch",
            "code",
        ]
    )
    """Argument keys holding free text or code (editor strings)."""
    ignore_keys: list[str] = Field(
        default_factory=lambda: [
            "thought",
            "reasoning",
            "explanation",
            "description",
            "summary",
            "security_risk",
            "timeout",
            "is_input",
        ]
    )
    """Argument keys left out of the comparison (commentary, execution knobs)."""
    tool_aliases: dict[str, str] = Field(
        default_factory=lambda: {
            "execute_bash": "bash",
            "run_bash": "bash",
            "bash_command": "bash",
            "shell": "bash",
            "terminal": "bash",
        }
    )
    """Tool names meaning the same tool (compared lower-case)."""
    program_aliases: dict[str, str] = Field(default_factory=lambda: {"python3": "python"})
    """Programs meaning the same in the task image (commands' first words)."""
    edit_pairs: dict[str, str] = Field(
        default_factory=lambda: {"new_str": "old_str", "new_string": "old_string"}
    )
    """Replacement text → the text it replaces: the edit itself (tokens removed and added) must also be
    ``text_similarity`` alike, so a one-token change inside a long string is not a match."""
    ignore_stderr_merge: bool = True
    """``2>&1`` / ``|&`` change nothing: the observation holds stdout and stderr together."""


class ToolAction(BaseModel):
    """A tool call: name and arguments."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def bash(cls, command: str) -> Self:
        return cls(tool="bash", arguments={"command": command})

    @classmethod
    def from_any(cls, data: Any) -> Self:
        """From ``{"tool", "arguments"}``, an OpenAI tool call (``{"function": {"name", "arguments"}}``),
        a Responses ``{"type": "function_call", "name", "arguments"}``, ``{"name", "arguments"}``
        or ``{"command": ...}`` (bash); string arguments are decoded as JSON."""
        if isinstance(data, str):
            return cls.bash(data)
        if not isinstance(data, dict):
            raise TypeError(f"an action must be an object, got {type(data).__name__}")
        if "function" in data and isinstance(data["function"], dict):
            data = data["function"]
        name = data.get("tool") or data.get("name")
        if not name:
            if "command" in data:
                return cls.bash(data["command"])
            raise ValueError(f"an action needs a tool name: {sorted(data)}")
        args = data.get("arguments", data.get("input", {}))
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        if not isinstance(args, dict):
            raise TypeError(f"arguments of {name} must be an object, got {type(args).__name__}")
        return cls(tool=str(name), arguments=args)


class ExpertAction(ToolAction):
    """The expert's action at a pivot."""


class PolicyAction(ToolAction):
    """The policy's action; `error` says why its arguments could not be read (the name could)."""

    error: str | None = None


class ParsedAction(BaseModel):
    action: PolicyAction | None = None
    reason: str | None = None
    """Why there is no action."""


class PivotScore(BaseModel):
    score: float
    category: PivotCategory
    details: dict[str, Any] = Field(default_factory=dict)

    def as_reward(self) -> dict[str, Any]:
        """The dict slime's ``--reward-key score`` reads (plus what to log)."""
        return {
            "score": self.score,
            "acc": 1.0 if self.category is PivotCategory.MATCH else 0.0,
            "category": self.category.value,
        }


# --------------------------------------------------------------------------- parsing

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')


def _tool_call(raw: str) -> PolicyAction | None:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        m = _NAME.search(raw)
        return PolicyAction(tool=m.group(1), error=f"tool call is not JSON: {exc}") if m else None
    if not isinstance(data, dict) or not isinstance(data.get("name", data.get("function")), (str, dict)):
        return None
    try:
        return PolicyAction.from_any(data)
    except (ValueError, TypeError) as exc:
        fn = data["function"] if isinstance(data.get("function"), dict) else data
        return PolicyAction(tool=str(fn.get("name")), error=str(exc))


def parse_action(
    text: str, *, harness: str = "bash_block", tool_calls: list[dict[str, Any]] | None = None
) -> ParsedAction:
    """The single action of an assistant turn (thinking ignored). ``bash_block``: exactly one
    ```bash block; ``tool_call``: exactly one call, from `tool_calls` (an OpenAI message's) or
    Hermes ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` in the text; ``auto``:
    tool calls when there are any, else a bash block."""
    text = strip_thinking(text or "")
    text = text.split("<think>", 1)[0]  # thinking that never closed (a turn cut short) holds no action
    if harness in ("tool_call", "auto"):
        raws: list[Any] = list(tool_calls) if tool_calls else _TOOL_CALL.findall(text)
        if raws or harness == "tool_call":
            if len(raws) != 1:
                return ParsedAction(reason=f"{len(raws)} tool calls, exactly one expected")
            action = _tool_call(raws[0]) if isinstance(raws[0], str) else _tool_call(json.dumps(raws[0]))
            return ParsedAction(action=action, reason=None if action else "unreadable tool call")
    elif harness != "bash_block":
        raise ValueError(f"unknown harness {harness!r} (bash_block, tool_call, auto)")
    blocks = find_bash_blocks(text)
    if len(blocks) != 1:
        return ParsedAction(reason=f"{len(blocks)} bash blocks, exactly one expected")
    if not blocks[0].strip():
        return ParsedAction(reason="empty bash block")
    return ParsedAction(action=PolicyAction.bash(blocks[0].strip()))


def _schema(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name and isinstance(fn.get("parameters"), dict):
            return fn["parameters"]
    return None


# --------------------------------------------------------------------------- compare


def compare(
    policy: PolicyAction | None,
    expert: ExpertAction,
    cfg: PivotRewardConfig | None = None,
    *,
    tools: list[dict[str, Any]] | None = None,
    workdir: str | None = None,
) -> PivotScore:
    """Score the policy's action against the expert's (see the module doc for the rules)."""
    cfg = cfg or PivotRewardConfig()
    workdir = workdir or cfg.workdir
    miss = cfg.reward_miss
    if policy is None:
        return PivotScore(score=miss, category=PivotCategory.NO_ACTION)

    def canon(name: str) -> str:
        return cfg.tool_aliases.get(name.lower(), name.lower())

    if canon(policy.tool) != canon(expert.tool):
        return PivotScore(
            score=miss,
            category=PivotCategory.WRONG_TOOL,
            details={"expert_tool": expert.tool, "policy_tool": policy.tool},
        )
    if policy.error is not None:
        return PivotScore(score=miss, category=PivotCategory.BAD_ARGUMENTS, details={"error": policy.error})
    schema = _schema(tools, expert.tool) or {}
    properties = schema.get("properties")
    known = set(properties) | set(cfg.ignore_keys) if isinstance(properties, dict) and properties else None
    try:
        credits, details = compare_arguments(
            expert.arguments,
            policy.arguments,
            cfg,
            workdir,
            required=list(schema.get("required") or []),
            known=known,
        )
    except BadArguments as exc:
        return PivotScore(score=miss, category=PivotCategory.BAD_ARGUMENTS, details={"error": str(exc)})
    if all(c >= 1.0 for c in credits.values()):
        return PivotScore(score=cfg.reward_match, category=PivotCategory.MATCH, details={})
    score = miss
    if cfg.partial_credit > 0 and credits:
        score = miss + (cfg.reward_match - miss) * cfg.partial_credit * sum(credits.values()) / len(credits)
    return PivotScore(
        score=score,
        category=PivotCategory.MISMATCH,
        details={"keys": details, "similarity": {k: round(v, 4) for k, v in credits.items()}},
    )


def score_turn(
    text: str,
    expert: ExpertAction | dict[str, Any],
    cfg: PivotRewardConfig | None = None,
    *,
    harness: str = "bash_block",
    tools: list[dict[str, Any]] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    workdir: str | None = None,
) -> PivotScore:
    """Parse an assistant turn and score its action; the parsed action is kept in details."""
    if not isinstance(expert, ExpertAction):
        expert = ExpertAction.from_any(expert)
    parsed = parse_action(text, harness=harness, tool_calls=tool_calls)
    result = compare(parsed.action, expert, cfg, tools=tools, workdir=workdir)
    result.details["policy_action"] = parsed.action.model_dump(exclude_none=True) if parsed.action else None
    if parsed.reason:
        result.details["reason"] = parsed.reason
    return result
