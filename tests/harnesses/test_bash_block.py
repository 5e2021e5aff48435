"""The bash-block harness: parsing one turn, submission, observations, prompts."""

from __future__ import annotations

import pytest

from swe_rl.agent.errors import FormatError
from swe_rl.agent.protocols import Action, PolicyTurn
from swe_rl.fleet.client import ExecResult
from swe_rl.harnesses.bash_block import (
    SUBMIT_SENTINEL,
    BashBlockConfig,
    BashBlockHarness,
    strip_thinking,
    truncate_middle,
)
from swe_rl.tasks import TaskInstance

INSTANCE = TaskInstance(
    instance_id="demo__demo-1",
    repo="demo/demo",
    problem_statement="`add(1, 1)` returns 3.",
    image="swe-rl/base:bookworm",
)


def turn(text: str, **kw) -> PolicyTurn:
    return PolicyTurn(text=text, **kw)


def result(output: str, returncode: int = 0, timed_out: bool = False, duration: float = 0.1) -> ExecResult:
    return ExecResult(
        returncode=returncode,
        output=output,
        timed_out=timed_out,
        truncated=False,
        output_bytes=len(output),
        duration=duration,
    )


@pytest.fixture(scope="module")
def harness() -> BashBlockHarness:
    return BashBlockHarness()


def test_one_block_is_one_action(harness):
    actions = harness.parse(turn("Let me look around.\n\n```bash\nls -la && cat setup.py\n```\n"))
    assert actions == [Action(command="ls -la && cat setup.py")]


def test_multiline_block_is_kept_whole(harness):
    text = "Write a file.\n```bash\ncat <<'EOF' > x.py\nprint(1)\nEOF\n```"
    assert harness.parse(turn(text))[0].command == "cat <<'EOF' > x.py\nprint(1)\nEOF"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I think the bug is in add().", "no ```bash block"),
        ("```python\nprint(1)\n```", "no ```bash block"),
        ("```bash\nls\n```\nthen\n```bash\ncat a\n```", "2 ```bash blocks"),
        ("```bash\n\n```", "empty"),
    ],
)
def test_zero_two_or_empty_blocks_are_format_errors(harness, text, reason):
    with pytest.raises(FormatError, match=reason):
        harness.parse(turn(text))


def test_cut_off_turn_says_so(harness):
    with pytest.raises(FormatError, match="cut off at the length limit"):
        harness.parse(turn("Let me think about this very long", finish_reason="length"))


def test_blocks_inside_thinking_do_not_count(harness):
    text = "<think>maybe ```bash\nrm -rf /\n``` no</think>Checking.\n```bash\ngit status\n```"
    assert harness.parse(turn(text)) == [Action(command="git status")]
    # thinking opened by the chat template: only the closing tag is in the content
    assert strip_thinking("first ```bash\nx\n``` idea</think>answer") == "answer"


def test_format_error_feedback_names_the_problem_and_the_submit_command(harness):
    with pytest.raises(FormatError) as info:
        harness.parse(turn("```bash\na\n```\n```bash\nb\n```"))
    [message] = harness.format_error_messages(info.value, remaining_steps=10)
    assert message["role"] == "user"
    assert "2 ```bash blocks" in message["content"]
    assert harness.config.submit_command in message["content"]


def test_sentinel_first_line_submits_the_rest(harness):
    action = Action(command=harness.config.submit_command)
    patch = "diff --git a/f b/f\n--- a/f\n+++ b/f\n"
    assert harness.submission(action, result(f"{SUBMIT_SENTINEL}\n{patch}")) == patch
    assert harness.submission(action, result(f"\n  {SUBMIT_SENTINEL}  \n")) == ""
    assert harness.submission(action, result(f"before\n{SUBMIT_SENTINEL}\n")) is None
    assert harness.submission(action, result("all good\n")) is None


def test_observation_shows_returncode_and_output(harness):
    [message] = harness.observation_messages(
        Action(command="false"), result("boom\n", returncode=1), remaining_steps=20
    )
    assert message == {"role": "user", "content": "<returncode>1</returncode>\n<output>\nboom\n</output>"}


def test_long_output_keeps_head_and_tail_with_a_marker(harness):
    output = "H" * 3000 + "M" * 10000 + "T" * 3000
    [message] = harness.observation_messages(
        Action(command="cat big"), result(output), remaining_steps=20, max_chars=4000
    )
    content = message["content"]
    assert "H" * 2000 in content and "T" * 2000 in content and "MMMM" not in content
    assert "[... 12000 characters elided ...]" in content
    assert "12000 characters in the middle were left out" in content
    assert truncate_middle("short", 10) == ("short", 0)


def test_timeout_is_rendered_with_partial_output(harness):
    [message] = harness.observation_messages(
        Action(command="sleep 99"), result("started\n", 124, True, 2.0), remaining_steps=20
    )
    assert "did not finish within 2.0 seconds and was killed" in message["content"]
    assert "started" in message["content"]


def test_remaining_steps_reminder_appears_near_the_end(harness):
    far = harness.observation_messages(Action(command="ls"), result("a\n"), remaining_steps=10)[0]["content"]
    near = harness.observation_messages(Action(command="ls"), result("a\n"), remaining_steps=2)[0]["content"]
    assert "left" not in far
    assert "2 answers left" in near


def test_initial_messages_carry_the_issue_and_the_submit_command(harness):
    system, user = harness.initial_messages(INSTANCE, step_limit=30)
    assert system["role"] == "system" and "```bash" in system["content"]
    assert "`add(1, 1)` returns 3." in user["content"] and "/testbed" in user["content"]
    assert "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached" in user["content"]
    assert "30 answers" in user["content"]


def test_assistant_message_keeps_reasoning_separately(harness):
    message = harness.assistant_message(turn("```bash\nls\n```", reasoning="look first"))
    assert message == {"role": "assistant", "content": "```bash\nls\n```", "reasoning_content": "look first"}
    plain = BashBlockHarness(BashBlockConfig.from_yaml(keep_reasoning=False))
    assert "reasoning_content" not in plain.assistant_message(turn("x", reasoning="look first"))


def test_templates_are_strict(tmp_path):
    config = BashBlockConfig.from_yaml(observation_template="{{ no_such_variable }}")
    with pytest.raises(Exception, match="no_such_variable"):
        BashBlockHarness(config).observation_messages(Action(command="ls"), result(""), remaining_steps=5)
