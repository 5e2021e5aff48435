"""Argument matching of the pivot reward: how close the policy's arguments are to the expert's, key by key.

`pivot.compare` decides the category from the tool and the verdict here: `compare_arguments` gives a
similarity in [0, 1] per key over the union of keys (1 = equal; a missing or extra key 0), or raises
`BadArguments` for malformed arguments (a value of the wrong type, a required key missing, a key the
tool does not take, a command that does not lex). Values are compared by key and type as the
`pivot` module doc says: shell commands canonically (`shell_norm`), paths normalised, texts and edits
as token sequences against ``text_similarity``, numbers within ``float_tolerance``, lists and
objects element by element. Tokenizing is cached: an expert's strings are scored K times.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from swe_rl.rewards.shell_norm import ShellSyntaxError, canonical_command, normalize_path

if TYPE_CHECKING:
    from swe_rl.rewards.pivot import PivotRewardConfig

__all__ = ["BadArguments", "compare_arguments"]


_TOKEN = re.compile(r"\w+|[^\w\s]")


class BadArguments(Exception):
    """Malformed arguments (bad_arguments)."""


@functools.lru_cache(maxsize=4096)
def _tokens(text: str) -> tuple[str, ...]:
    """Words and punctuation, whitespace dropped (cached: an expert's strings are scored K times)."""
    return tuple(_TOKEN.findall(text))


def _trim(a: Sequence[str], b: Sequence[str]) -> tuple[int, int]:
    """Lengths of the common prefix and (non-overlapping) common suffix."""
    n = min(len(a), len(b))
    p = 0
    while p < n and a[p] == b[p]:
        p += 1
    q = 0
    while q < n - p and a[-1 - q] == b[-1 - q]:
        q += 1
    return p, q


def _similarity(a: Sequence[str], b: Sequence[str], threshold: float) -> float:
    """2 × matched tokens / total tokens: a common prefix and suffix, then difflib's matches in between
    (edits are local, so the quadratic part only sees what changed)."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    p, q = _trim(a, b)
    mid_a, mid_b = a[p : len(a) - q], b[p : len(b) - q]
    total = len(a) + len(b)
    if not mid_a or not mid_b:
        return 2 * (p + q) / total
    m = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
    bound = (2 * (p + q) + m.quick_ratio() * (len(mid_a) + len(mid_b))) / total
    if bound < threshold:
        return bound  # an upper bound below the bar: enough
    return (2 * (p + q) + 2 * sum(block.size for block in m.get_matching_blocks())) / total


def _command_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        if (
            len(value) == 3
            and value[0] in ("bash", "sh", "/bin/bash", "/bin/sh")
            and value[1] in ("-c", "-lc")
        ):
            return value[2]
        import shlex

        return shlex.join(value)
    raise BadArguments(f"a command must be a string or a list of strings, got {type(value).__name__}")


def _compare_command(
    exp: Any, act: Any, cfg: PivotRewardConfig, workdir: str
) -> tuple[float, dict[str, Any]]:
    exp_text, act_text = _command_text(exp), _command_text(act)
    if not act_text.strip():
        raise BadArguments("empty command")
    opts: dict[str, Any] = {"aliases": cfg.program_aliases, "ignore_stderr_merge": cfg.ignore_stderr_merge}
    try:
        exp_c = canonical_command(exp_text, workdir, **opts)
    except ShellSyntaxError:  # an expert command we cannot lex: compare whitespace-separated words
        return float(exp_text.split() == act_text.split()), {"rule": "words"}
    try:
        act_c = canonical_command(act_text, workdir, **opts)
    except ShellSyntaxError as exc:
        raise BadArguments(f"the command does not parse: {exc}") from None
    if exp_c.form != act_c.form or len(exp_c.bodies) != len(act_c.bodies):
        sim = _similarity(exp_c.flat(), act_c.flat(), 1.0) if cfg.partial_credit else 0.0
        return sim, {"rule": "shell", "expert": exp_c.flat(), "policy": act_c.flat()}
    sims = [
        _similarity(_tokens(e), _tokens(a), cfg.text_similarity) for e, a in zip(exp_c.bodies, act_c.bodies)
    ]
    if all(s >= cfg.text_similarity for s in sims):
        return 1.0, {"rule": "shell"}
    return min(sims), {"rule": "shell", "heredoc_similarity": [round(s, 4) for s in sims]}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _value(
    exp: Any, act: Any, key: str, cfg: PivotRewardConfig, workdir: str
) -> tuple[float, dict[str, Any]]:
    """Similarity in [0, 1] (1 = equal) of one argument value; raises `BadArguments` for a wrong type."""
    if key in cfg.command_keys and isinstance(exp, (str, list)):
        return _compare_command(exp, act, cfg, workdir)
    if _is_number(exp):
        if isinstance(act, str):
            try:
                act = float(act)
            except ValueError:
                raise BadArguments(f"{key}: expected a number, got {act!r}") from None
        if not _is_number(act):
            raise BadArguments(f"{key}: expected a number, got {type(act).__name__}")
        return float(abs(float(exp) - float(act)) <= cfg.float_tolerance), {}
    if type(exp) is not type(act) and not (exp is None or act is None):
        raise BadArguments(f"{key}: expected {type(exp).__name__}, got {type(act).__name__}")
    if isinstance(exp, str):
        if key in cfg.path_keys:
            return float(normalize_path(exp.strip(), workdir) == normalize_path(act.strip(), workdir)), {
                "rule": "path"
            }
        if key in cfg.text_keys:
            sim = _similarity(_tokens(exp), _tokens(act), cfg.text_similarity)
            return (1.0 if sim >= cfg.text_similarity else sim), {"rule": "text", "similarity": round(sim, 4)}
        return float(" ".join(exp.split()) == " ".join(act.split())), {}
    if isinstance(exp, list):
        if len(exp) != len(act):
            return 0.0, {"rule": "list", "lengths": [len(exp), len(act)]}
        sims = [_value(e, a, key, cfg, workdir)[0] for e, a in zip(exp, act)]
        return (min(sims) if sims else 1.0), {"rule": "list"}
    if isinstance(exp, dict):
        credits, _ = compare_arguments(exp, act, cfg, workdir, required=())
        return (sum(credits.values()) / len(credits) if credits else 1.0), {"rule": "object"}
    return float(exp == act), {}


def compare_arguments(
    exp: dict[str, Any],
    act: dict[str, Any],
    cfg: PivotRewardConfig,
    workdir: str,
    required: tuple[str, ...] | list[str],
    known: set[str] | None = None,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Per-key similarity over the union of keys; raises `BadArguments` for malformed arguments."""
    exp = {k: v for k, v in exp.items() if k not in cfg.ignore_keys and v is not None}
    act = {k: v for k, v in act.items() if k not in cfg.ignore_keys and v is not None}
    missing = [k for k in required if k in exp and k not in act]
    if missing:
        raise BadArguments(f"required argument(s) missing: {missing}")
    unknown = sorted(k for k in act if known is not None and k not in known)
    if unknown:
        raise BadArguments(f"argument(s) the tool does not take: {unknown}")
    credits: dict[str, float] = {}
    details: dict[str, Any] = {}
    for key in sorted(set(exp) | set(act)):
        if key not in exp or key not in act:
            credits[key] = 0.0
            details[key] = "missing" if key in exp else "extra"
            continue
        credits[key], info = _value(exp[key], act[key], key, cfg, workdir)
        base = cfg.edit_pairs.get(key)
        if credits[key] >= 1.0 and base and all(isinstance(d.get(base), str) for d in (exp, act)):
            sim = _similarity(_edit(exp[base], exp[key]), _edit(act[base], act[key]), cfg.text_similarity)
            if sim < cfg.text_similarity:
                credits[key], info = sim, {"rule": "edit", "similarity": round(sim, 4)}
        if credits[key] < 1.0:
            details[key] = info or "differs"
    return credits, details


def _edit(old: str, new: str) -> list[str]:
    """What an edit changes, as tokens: ``-x`` removed, ``+y`` added, ``|`` between changes."""
    a, b = _tokens(old), _tokens(new)
    p, q = _trim(a, b)
    a, b = a[p : len(a) - q], b[p : len(b) - q]
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op != "equal":
            out += [f"-{t}" for t in a[i1:i2]] + [f"+{t}" for t in b[j1:j2]] + ["|"]
    return out
