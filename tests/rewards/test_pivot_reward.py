"""The pivot reward on hand-made pivots: one rule or category per test, strictness included."""

from __future__ import annotations

import pytest

from swe_rl.rewards.pivot import (
    ExpertAction,
    PivotCategory,
    PivotRewardConfig,
    PolicyAction,
    compare,
    parse_action,
    score_turn,
)
from swe_rl.rewards.shell_norm import canonical_command

MATCH, MISMATCH, BAD = PivotCategory.MATCH, PivotCategory.MISMATCH, PivotCategory.BAD_ARGUMENTS
EDITOR_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "description": "edit files",
            "parameters": {
                "type": "object",
                "required": ["command", "path"],
                "properties": {
                    "command": {"type": "string"},
                    "path": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                    "view_range": {"type": "array"},
                },
            },
        },
    }
]


def bash(command: str) -> PolicyAction:
    return PolicyAction.bash(command)


def expert_bash(command: str) -> ExpertAction:
    return ExpertAction.bash(command)


def same(a: str, b: str, **cfg) -> PivotCategory:
    return compare(bash(a), expert_bash(b), PivotRewardConfig(**cfg)).category


# --------------------------------------------------------------------------- bash: equivalent spellings


@pytest.mark.parametrize("policy, expert", [
    ("grep -rn 'def interleave' toolz/", 'grep -rn "def interleave" toolz/'),          # quoting
    ("grep  -rn   def\\ interleave toolz/", "grep -rn 'def interleave' toolz/"),       # whitespace, escapes
    ("grep -n -r foo src", "grep -rn foo src"),                                       # split / combined flags
    ("grep foo -nr src", "grep -rn foo src"),                                         # flags anywhere (GNU)
    ("ls -la", "ls -al"),
    ("cat /testbed/toolz/itertoolz.py", "cat toolz/itertoolz.py"),                    # workdir prefix
    ("cat ./toolz/itertoolz.py", "cat toolz/itertoolz.py"),                           # ./
    ("cd /testbed && python -m pytest -x -q tests", "python -m pytest -xq tests"),   # leading cd workdir
    ("python3 reproduce.py", "python reproduce.py"),                                  # program alias
    ("python reproduce.py 2>&1", "python reproduce.py"),                              # stderr merge
    ("sed -n '10,20p' a.py", "sed -n 10,20p /testbed/a.py"),
    ("head -20 a.py", "head -n 20 a.py"),
    ("tail -n50 log.txt", "tail --lines=50 log.txt"),
    ("bash -lc 'ls src'", "ls src"),                                                  # bash -c wrapper
    ("ls src\n", "ls src;"),                                                          # trailing separators
    ("cd /testbed\ngrep -n x a.py", "grep -n x a.py"),                                # newline = ;
    ("grep -n x a.py | head -5", "grep -n x a.py|head -n 5"),
    ("echo hi > /testbed/out.txt", "echo hi >out.txt"),                               # redirect target path
])  # fmt: skip
def test_equivalent_spellings_match(policy, expert):
    assert same(policy, expert) is MATCH


@pytest.mark.parametrize("policy, expert", [
    ("ls -la src", "grep -rn interleave toolz"),                  # unrelated multi-word commands
    ("python -m pytest tests/test_a.py", "git diff HEAD -- src"),
    ("find . -name '*.py' | xargs wc -l", "cat setup.py README.md"),
    ("grep -rn foo src", "grep -rn bar src"),                    # one argument differs
    ("grep -rn foo src", "grep -rni foo src"),                   # a flag differs
    ("grep -e foo -n src", "grep -n -e bar src"),                # a flag's value differs
    ("sed -n '10,20p' a.py", "sed -n '10,21p' a.py"),
    ("a && b", "a; b"),                                          # operators are not interchangeable
    ("a | b", "b | a"),                                          # pipeline order
    ("./run.sh", "run.sh"),                                      # ./ of a program matters
    ("head -20 a.py", "tail -20 a.py"),
    ("cd src && ls", "ls"),                                      # cd elsewhere is not dropped
    ("rm -rf build", "rm -rf dist"),
    ("python reproduce.py > out.txt", "python reproduce.py"),    # a redirection to a file matters
    ("sed -in 's/a/b/' f", "sed -n -i 's/a/b/' f"),              # sed -in is -i with suffix n: not split
])  # fmt: skip
def test_different_commands_mismatch(policy, expert):
    assert same(policy, expert) is MISMATCH


def test_strictness_unrelated_multi_word_commands_never_match():
    # a word-overlap rule with threshold 0 accepts any two multi-word strings; this one must not
    commands = [
        "ls -la",
        "grep -rn foo src",
        "python reproduce.py",
        "git status --short",
        "cat a.py b.py",
        "sed -n 1,40p toolz/itertoolz.py",
        "pip install -e .",
        "python -m pytest -x tests",
    ]
    for a in commands:
        for b in commands:
            assert (same(a, b) is MATCH) == (a == b), (a, b)


def test_heredoc_bodies_compared_as_text():
    body = "import toolz\n\nprint(list(toolz.interleave([[1, 2], [3]])))\n"
    expert = f"cat <<'EOF' > /testbed/reproduce.py\n{body}EOF"
    assert (
        same(f"cat > reproduce.py << EOF\n{body.replace('  ', ' ')}EOF", expert) is MATCH
    )  # whitespace, delimiter
    assert same(f"cat <<'END' > reproduce.py\n{body}END\npython reproduce.py", expert) is MISMATCH
    other = "import os\nprint(os.getcwd())\n"
    assert same(f"cat <<'EOF' > reproduce.py\n{other}EOF", expert) is MISMATCH


def test_unparseable_policy_command_is_bad_arguments_and_expert_falls_back_to_words():
    assert same("echo 'unterminated", "echo ok") is BAD
    assert same("echo  'odd", "echo 'odd") is MATCH  # the expert does not lex either: whitespace words


def test_canonical_form_details():
    c = canonical_command(
        "cd /testbed && FOO=1 python3 -m pytest -xq /testbed/tests/test_a.py 2>&1 | tail -n 30"
    )
    assert c.flat() == [
        "FOO=1",
        "python",
        "-m",
        "pytest",
        "q",
        "x",
        "tests/test_a.py",
        "|",
        "tail",
        "-n",
        "30",
    ]


# --------------------------------------------------------------------------- tool calls


def test_tool_name_must_match_and_aliases():
    expert = ExpertAction(tool="execute_bash", arguments={"command": "ls"})
    assert compare(PolicyAction(tool="bash", arguments={"command": "ls"}), expert).category is MATCH
    got = compare(PolicyAction(tool="str_replace_editor", arguments={"command": "view", "path": "a"}), expert)
    assert got.category is PivotCategory.WRONG_TOOL and got.score == 0.0


def test_editor_strings_whitespace_insensitive_with_similarity_threshold():
    old = "def interleave(seqs):\n    iters = itertools.takewhile(predicate, iters)\n    return iters\n"
    new = old.replace(
        "itertools.takewhile(predicate, iters)", "itertools.cycle(itertools.takewhile(predicate, iters))"
    )
    expert = ExpertAction(
        tool="str_replace_editor",
        arguments={
            "command": "str_replace",
            "path": "/testbed/toolz/itertoolz.py",
            "old_str": old,
            "new_str": new,
        },
    )

    def policy(**over):
        args = {
            "command": "str_replace",
            "path": "toolz/itertoolz.py",
            "old_str": old,
            "new_str": new,
            **over,
        }
        return compare(PolicyAction(tool="str_replace_editor", arguments=args), expert, tools=EDITOR_TOOLS)

    assert policy().category is MATCH
    assert policy(new_str=new.replace("    ", "\t").replace(", ", ",")).category is MATCH  # whitespace only
    assert policy(new_str=old).category is MISMATCH  # the edit that changes nothing
    assert policy(path="toolz/utils.py").category is MISMATCH
    # one token of 27 differs: the texts are 0.96 alike, but the edits (what old_str -> new_str changes) are not
    chain = policy(new_str=new.replace("cycle", "chain"))
    assert chain.category is MISMATCH and chain.details["keys"]["new_str"]["rule"] == "edit"
    # texts alone, without the edit rule, pass the bar
    loose = compare(
        PolicyAction(
            tool="str_replace_editor",
            arguments={
                "command": "str_replace",
                "path": "toolz/itertoolz.py",
                "old_str": old,
                "new_str": new.replace("cycle", "chain"),
            },
        ),
        expert,
        PivotRewardConfig(edit_pairs={}),
    )
    assert loose.category is MATCH
    # a long old_str quoted with a few characters of difference still matches (similarity bar)
    assert policy(old_str=old.replace("return iters", "return  iters #")).category is MISMATCH
    long_old = old * 6
    assert (
        compare(
            PolicyAction(
                tool="str_replace_editor",
                arguments={
                    "command": "str_replace",
                    "path": "toolz/itertoolz.py",
                    "old_str": long_old[:-1] + " # note\n",
                    "new_str": new,
                },
            ),
            ExpertAction(
                tool="str_replace_editor",
                arguments={
                    "command": "str_replace",
                    "path": "toolz/itertoolz.py",
                    "old_str": long_old,
                    "new_str": new,
                },
            ),
        ).category
        is MATCH
    )


def test_bad_arguments():
    expert = ExpertAction(tool="str_replace_editor", arguments={"command": "view", "path": "a.py"})
    cases = [
        PolicyAction(tool="str_replace_editor", arguments={"command": "view"}),                   # required missing
        PolicyAction(tool="str_replace_editor", arguments={"command": "view", "path": 3}),        # wrong type
        PolicyAction(tool="str_replace_editor", arguments={"command": "view", "path": "a.py", "colour": "red"}),
        PolicyAction(tool="str_replace_editor", error="tool call is not JSON"),
    ]  # fmt: skip
    for action in cases:
        got = compare(action, expert, tools=EDITOR_TOOLS)
        assert got.category is BAD and got.score == 0.0, action
    # without a schema a missing or extra key is a mismatch, not malformed
    assert compare(cases[0], expert).category is MISMATCH
    assert compare(cases[2], expert).category is MISMATCH


def test_type_aware_values():
    expert = ExpertAction(
        tool="str_replace_editor", arguments={"command": "view", "path": "a.py", "view_range": [10, 40]}
    )

    def got(**args):
        return compare(
            PolicyAction(tool="str_replace_editor", arguments={"command": "view", "path": "a.py", **args}),
            expert,
            tools=EDITOR_TOOLS,
        ).category

    assert got(view_range=[10, 40]) is MATCH
    assert got(view_range=[10.0, "40"]) is MATCH  # numbers, also as numeric strings
    assert got(view_range=[10, 41]) is MISMATCH
    assert got(view_range=[10]) is MISMATCH
    assert got(view_range="10-40") is BAD
    assert got(view_range=[10, "forty"]) is BAD
    assert got(view_range=[10, 40], thought="let me look") is MATCH  # commentary keys are ignored


def test_codex_style_argv_command():
    expert = ExpertAction(tool="shell", arguments={"command": ["bash", "-lc", "grep -rn foo src"]})
    assert (
        compare(PolicyAction(tool="bash", arguments={"command": "grep -nr foo ./src"}), expert).category
        is MATCH
    )


def test_partial_credit_is_optional():
    expert = ExpertAction(tool="str_replace_editor", arguments={"command": "view", "path": "a.py"})
    policy = PolicyAction(tool="str_replace_editor", arguments={"command": "view", "path": "b.py"})
    assert compare(policy, expert).score == 0.0
    got = compare(policy, expert, PivotRewardConfig(partial_credit=0.5))
    assert got.category is MISMATCH and got.score == pytest.approx(0.25)  # half the keys, half the credit
    bad = PolicyAction(tool="str_replace_editor", arguments={"command": "view", "path": 1})
    assert compare(bad, expert, PivotRewardConfig(partial_credit=0.5)).score == 0.0
    shell = compare(
        bash("grep -rn foo src"), expert_bash("grep -rn bar src"), PivotRewardConfig(partial_credit=1.0)
    )
    assert 0.0 < shell.score < 1.0


def test_reward_scale():
    cfg = PivotRewardConfig(reward_match=1.0, reward_miss=-1.0)
    assert compare(bash("ls"), expert_bash("ls"), cfg).score == 1.0
    assert compare(None, expert_bash("ls"), cfg).score == -1.0


# --------------------------------------------------------------------------- parsing turns


def test_parse_bash_block_turns():
    thinking = "<think>\nmaybe ```bash\nrm -rf /\n``` no\n</think>\n\n"
    assert parse_action(thinking + "Look.\n\n```bash\nls src\n```").action == PolicyAction.bash("ls src")
    assert parse_action("no block").reason == "0 bash blocks, exactly one expected"
    assert parse_action("```bash\nls\n```\n```bash\npwd\n```").action is None
    assert parse_action("```bash\n  \n```").reason == "empty bash block"


def test_parse_hermes_tool_calls():
    text = 'Let me view it.\n<tool_call>\n{"name": "str_replace_editor", "arguments": {"command": "view", "path": "a.py"}}\n</tool_call>'
    assert parse_action(text, harness="tool_call").action == PolicyAction(
        tool="str_replace_editor", arguments={"command": "view", "path": "a.py"}
    )
    stringly = '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"ls\\"}"}</tool_call>'
    assert parse_action(stringly, harness="tool_call").action == PolicyAction.bash("ls")
    broken = parse_action(
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>', harness="tool_call"
    )
    assert broken.action.tool == "bash" and broken.action.error
    assert parse_action("<tool_call>not json</tool_call>", harness="tool_call").action is None
    two = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>'
    assert parse_action(two, harness="tool_call").reason == "2 tool calls, exactly one expected"
    openai = [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    ]
    assert parse_action("", harness="tool_call", tool_calls=openai).action == PolicyAction.bash("ls")
    assert parse_action("```bash\nls\n```", harness="auto").action == PolicyAction.bash("ls")


@pytest.mark.parametrize("text, harness, category", [
    ("I think we are done.", "bash_block", PivotCategory.NO_ACTION),
    ("```bash\nls\n```\n```bash\nls\n```", "bash_block", PivotCategory.NO_ACTION),
    ('<tool_call>{"name": "str_replace_editor", "arguments": {"command": "view", "path": "a.py"}}</tool_call>',
     "tool_call", PivotCategory.WRONG_TOOL),
    ('<tool_call>{"name": "bash", "arguments": {"command": "grep -rn \'foo src"}}</tool_call>', "tool_call", BAD),
    ("```bash\ngrep -rn bar src\n```", "bash_block", MISMATCH),
    ("<think>\nsearch\n</think>\n\n```bash\ngrep -nr foo /testbed/src\n```", "bash_block", MATCH),
])  # fmt: skip
def test_every_category_from_a_turn(text, harness, category):
    got = score_turn(text, {"tool": "bash", "arguments": {"command": "grep -rn foo src"}}, harness=harness)
    assert got.category is category, got
    assert got.score == (1.0 if category is MATCH else 0.0)
    assert got.as_reward()["category"] == category.value


def test_expert_action_shapes():
    assert ExpertAction.from_any({"command": "ls"}) == ExpertAction.bash("ls")
    assert ExpertAction.from_any(
        {"type": "function_call", "name": "bash", "arguments": '{"command": "ls"}'}
    ) == ExpertAction.bash("ls")
    assert ExpertAction.from_any(
        {"function": {"name": "bash", "arguments": {"command": "ls"}}}
    ) == ExpertAction.bash("ls")
    with pytest.raises(ValueError):
        ExpertAction.from_any({"arguments": {}})
