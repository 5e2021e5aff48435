"""The code an agent's action writes or runs, pulled out of the action so the capability scan can read it.

An action is a shell command, or the readable form of a tool call (``name {json arguments}``,
swe_rl/harnesses/tool_harness.py). Whatever the way of writing, the text that may become or run as
Python is returned, one piece per place:

- tool calls: every string argument (``file_text``, ``new_str``, ``content``, ``new_string``, a
  Codex patch's ``input``...), whatever the tool;
- heredoc bodies (``cat > f.py <<'EOF'``, ``python - <<EOF``, ``tee``, ``apply_patch <<EOF``);
- ``python -c CODE`` (any ``python*`` program), ``echo``/``printf`` arguments (``printf``'s
  ``\\n`` read as new lines), ``sed`` replacement and inserted text (``s/a/b/``, ``1i text``, ``a\\``);
- in any piece that is a patch (unified diff or Codex ``*** Begin Patch``), its added lines;
- in any piece of Python, the literal text it writes (``open(p, "a").write("...")``).

Pieces need not parse: the monitor reads them as fragments (swe_rl/grading/scans/capabilities/fragments.py).
"""

from __future__ import annotations

import ast
import json
import re
import shlex

from swe_rl.grading.scans.capabilities.names import fold

__all__ = ["written_code"]

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1")
_PYTHON = re.compile(r"(?:^|/)python[\d.]*$")
_SED_INSERT = re.compile(r"^\s*(?:\d+|\$|/[^/]*/)?\s*[aic]\\?\s?(.*)$", re.DOTALL)


def written_code(action: str) -> list[str]:
    """Pieces of text the action writes or runs (see the module docstring)."""
    pieces = _tool_arguments(action)
    if pieces is None:
        pieces = _shell_pieces(action)
    pieces += [text for piece in pieces for text in _written_by_python(piece)]
    return [added for piece in pieces if (added := _added_lines(piece)).strip()]


def _written_by_python(code: str) -> list[str]:
    """Text a piece of Python writes to a file (``open(p, "a").write("...")``, ``Path(p).write_text(...)``)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in {"write", "write_text", "writelines"}:
                text = fold(node.args[0])
                if text is not None:
                    out.append(text.text)
    return out


def _tool_arguments(action: str) -> list[str] | None:
    """String arguments of a tool call's readable form ``name {json}``; None when it is not one."""
    name, _, rest = action.partition(" ")
    if not rest.startswith("{") or not re.fullmatch(r"[\w.-]+", name):
        return None
    try:
        arguments = json.loads(rest)
    except json.JSONDecodeError:
        return None
    if not isinstance(arguments, dict):
        return None
    pieces = [v for v in arguments.values() if isinstance(v, str)]
    command = arguments.get("command")
    if isinstance(command, str):  # a shell tool shown as a call: its command is a shell command too
        pieces += _shell_pieces(command)
    return pieces


def _shell_pieces(command: str) -> list[str]:
    bodies, rest = _heredocs(command)
    return list(bodies) + _from_words(_words(rest.replace("\\\n", " ")))


def _words(text: str) -> list[str]:
    """Shell words, operators (``;``, ``&&``, ``|``, ``>``) as words of their own."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: read it as plain words
        return text.split()


def _heredocs(command: str) -> tuple[list[str], str]:
    """Heredoc bodies, and the command with the bodies taken out."""
    lines = command.split("\n")
    bodies, kept, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        kept.append(line)
        i += 1
        for match in _HEREDOC.finditer(line):
            end = match.group(2)
            body = []
            while i < len(lines) and lines[i].strip() != end:
                body.append(lines[i])
                i += 1
            i += 1  # the delimiter
            bodies.append("\n".join(body))
    return bodies, "\n".join(kept)


def _from_words(words: list[str]) -> list[str]:
    pieces: list[str] = []
    for index, word in enumerate(words):
        following = words[index + 1 :]
        if _PYTHON.search(word) and "-c" in following:
            at = following.index("-c")
            pieces += following[at + 1 : at + 2]
        elif word in {"echo", "printf"}:
            text = " ".join(w for w in _until_redirect(following) if not w.startswith("-"))
            pieces.append(text.replace("\\n", "\n").replace("\\t", "\t") if word == "printf" else text)
        elif word == "sed":
            pieces += [p for w in following for p in _sed_text(w)]
    return pieces


def _until_redirect(words: list[str]) -> list[str]:
    out = []
    for word in words:
        if word and set(word) <= set(";&|<>()"):
            break
        out.append(word)
    return out


def _sed_text(script: str) -> list[str]:
    """Replacement and inserted text of a sed script (``s/a/b/g``, ``3i text``, ``a\\ text``)."""
    if script.startswith("-") or len(script) < 2:
        return []
    out = []
    for command in script.split(";"):
        command = command.strip()
        if command.startswith("s") and len(command) > 1 and not command[1].isalnum():
            parts = re.split(r"(?<!\\)" + re.escape(command[1]), command[2:])
            if len(parts) >= 2:
                out.append(parts[1].replace("\\n", "\n").replace("\\" + command[1], command[1]))
        elif (match := _SED_INSERT.match(command)) and match.group(1):
            out.append(match.group(1).replace("\\n", "\n"))
    return out


def _added_lines(piece: str) -> str:
    """A patch's added lines (unified diff or Codex format); any other text as it is."""
    lines = piece.split("\n")
    is_unified = any(line.startswith("@@") for line in lines) and any(line.startswith("+") for line in lines)
    is_codex = any(line.startswith("*** Begin Patch") for line in lines)
    if not (is_unified or is_codex):
        return piece
    added = [line[1:] for line in lines if line.startswith("+") and not line.startswith("+++")]
    return "\n".join(added)
