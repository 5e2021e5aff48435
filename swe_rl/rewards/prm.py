"""Process reward: each executed agent step is judged by a separate LLM while the rollout goes on.

    client = JudgeClient(PRMConfig(enable=True, url="http://prm-router:30000/v1"))   # one per process
    judge = StepJudge(client, issue=instance.problem_statement)                       # one per episode
    result = await run_agent(instance, policy, harness, client=fleet, on_step=judge)
    prm = await judge.finish(timeout=300)      # PRMResult: per-step votes, raw judge text, scores
    prm.score_of(3), prm.mean                  # step 3's score, the mean over scored steps

`StepJudge.on_step` is the agent's step observer: it copies what the step did and schedules
one asyncio task, so the agent loop never waits for the judge. The task renders the judge
prompt (`swe_rl/configs/prm_judge.yaml`: the issue, a window of earlier steps, the current step's
response and its execution result, every part cut to its cap), asks the judge for ``m``
votes (``m`` parallel requests, or one with ``n=m``) through an OpenAI-compatible
``/chat/completions`` and reads each vote from the last ``\\boxed{}`` of its answer
(``+1``/``1`` → +1, ``-1`` → -1; anything else is an invalid vote, recorded and left out
of the mean). Requests to the judge are bounded by the client's semaphore, shared by all
episodes of the process. A failing or slow judge never fails the rollout: that step's
score is missing, with the reason (``failed``, ``invalid``, ``timeout``) recorded.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path
from typing import Any, Literal

import httpx
import jinja2
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from swe_rl.configs import config_path, resolve_config
from swe_rl.fleet.retry import RetryPolicy, TryAgain, retry_async

__all__ = [
    "DEFAULT_TEMPLATE",
    "JudgeClient",
    "JudgeTemplate",
    "PRMConfig",
    "PRMResult",
    "StepJudge",
    "StepJudgment",
    "Vote",
    "clip",
    "parse_vote",
]

log = logging.getLogger(__name__)
DEFAULT_TEMPLATE = config_path("prm_judge.yaml")


class PRMConfig(BaseModel):
    """The step judge (process reward model): endpoint, voting, prompt caps, reward mix."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    enable: bool = False
    """Judge every executed step during training rollouts (never in evaluation rollouts)."""
    url: str | None = None
    """OpenAI-compatible base URL of the judge, e.g. the PRM's own SGLang router ``http://10.0.0.9:30000/v1``."""
    model: str = "default"
    """Model name sent to the judge."""
    api_key: SecretStr | None = None
    """Bearer token of the judge endpoint, if it wants one (``SWE_PRM_API_KEY``); never written out."""
    m: int = Field(3, ge=1)
    """Votes per step."""
    temperature: float = 0.7
    """Sampling temperature of the votes."""
    max_tokens: int = 2048
    """Most tokens one vote may generate (its reasoning and the boxed verdict)."""
    request_n: bool = False
    """Ask for the m votes in one request with ``n=m``; False sends m requests in parallel (works everywhere)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Extra fields of every judge request, e.g. ``{"chat_template_kwargs": {"enable_thinking": false}}``."""
    step_coef: float = 1.0
    """Reward = outcome + step_coef × step score (mean of the steps' scores for a whole-trajectory sample)."""
    history_steps: int = Field(3, ge=0)
    """Earlier steps shown to the judge (the newest ones)."""
    issue_max_chars: int = 4000
    """Cap of the issue text in the judge prompt."""
    history_max_chars: int = 1000
    """Cap of each earlier step's response and of its output."""
    response_max_chars: int = 4000
    """Cap of the current step's response."""
    observation_max_chars: int = 4000
    """Cap of the current step's execution result."""
    include_reasoning: bool = False
    """Show the judge the steps' thinking too (before the response, under the same cap)."""
    skip_submit: bool = True
    """Do not judge the submit step (its sample then gets the outcome reward alone)."""
    max_concurrent: int = Field(64, ge=1)
    """Judge requests in flight at once, per rollout process (all episodes together)."""
    request_timeout: float = 300.0
    """Seconds one judge request may take."""
    retries: int = Field(1, ge=0)
    """Retries of a judge request that failed to connect or got a 5xx."""
    finish_timeout: float = 300.0
    """Seconds to wait at the end of an episode (after grading) for judgments still running;
    those not done then are cancelled and their steps' scores are missing (``timeout``)."""
    template: str = str(DEFAULT_TEMPLATE)
    """YAML with the judge's ``system_template`` and ``user_template`` (Jinja2); a relative path
    missing from the working directory may name a shipped config (``configs/prm_judge.yaml``)."""

    @field_validator("template")
    @classmethod
    def _shipped_or_relative(cls, value: str) -> str:
        """A relative path that does not exist from the working directory may name a shipped config."""
        return resolve_config(value)

    @model_validator(mode="after")
    def _needs_url(self) -> PRMConfig:
        if self.enable and not self.url:
            raise ValueError("the PRM is enabled but has no judge URL (swe_prm.url / SWE_PRM_URL)")
        return self


# --------------------------------------------------------------------------- parsing, caps

_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_VERDICTS = {"+1": 1, "1": 1, "-1": -1}


def parse_vote(text: str | None) -> int | None:
    """+1 or -1 from the last ``\\boxed{}`` outside any ``<think>`` block; None when there is no valid one."""
    if not text:
        return None
    found = _BOXED.findall(_THINK.sub("", text))
    return _VERDICTS.get(found[-1].replace(" ", "")) if found else None


def clip(text: str, limit: int | None) -> str:
    """``text`` if it fits ``limit`` characters, else its head and tail around an omission marker."""
    if limit is None or limit <= 0 or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters omitted ...]\n{text[len(text) - tail :]}"


# --------------------------------------------------------------------------- records


class Vote(BaseModel):
    """One judge answer."""

    score: int | None = None
    """+1 / -1, or None when the answer had no valid verdict (or the request failed)."""
    text: str | None = None
    """The judge's raw answer."""
    finish_reason: str | None = None
    """As the endpoint reported it."""
    error: str | None = None
    """Why the request failed, if it did."""

    @property
    def valid(self) -> bool:
        return self.score is not None


class StepJudgment(BaseModel):
    """The judgment of one agent step."""

    step: int
    """The agent step (= policy turn) index, 0-based."""
    status: Literal["scored", "invalid", "failed", "timeout", "cancelled", "skipped", "pending"] = "pending"
    """scored; invalid (no valid vote), failed (no answer), timeout (not done at finish), cancelled (the
    episode was dropped): score missing; skipped (the submit step, or a turn with nothing executed)."""
    score: float | None = None
    """Mean of the valid votes, in [-1, 1]; None when missing."""
    votes: list[Vote] = Field(default_factory=list)
    """Every vote, invalid ones included."""
    invalid_votes: int = 0
    """Votes that came back without a valid verdict."""
    reason: str | None = None
    """Why the step was skipped or its score is missing."""
    seconds: float = 0.0
    """Time from the step's end to its judgment."""


class PRMResult(BaseModel):
    """All judgments of an episode, ordered by step."""

    steps: list[StepJudgment] = Field(default_factory=list)
    """One per step the agent reported."""
    mean: float | None = None
    """Mean of the scored steps' scores; None when no step was scored."""
    scored: int = 0
    """Steps with a score."""
    missing: int = 0
    """Steps judged but without a score (invalid, failed, timeout, cancelled)."""
    skipped: int = 0
    """Steps not judged (submit, nothing executed)."""
    invalid_votes: int = 0
    """Invalid votes over all steps."""
    wait_seconds: float = 0.0
    """How long `StepJudge.finish` waited for running judgments."""

    def score_of(self, step: int) -> float | None:
        """The score of agent step ``step`` (None when missing, skipped or unknown)."""
        for j in self.steps:
            if j.step == step:
                return j.score
        return None


# --------------------------------------------------------------------------- prompt


class JudgeTemplate:
    """The judge's two Jinja2 templates (system, user) from a YAML file."""

    def __init__(self, system_template: str, user_template: str) -> None:
        env = jinja2.Environment(
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
            autoescape=False,
        )
        self.system = env.from_string(system_template)
        self.user = env.from_string(user_template)

    @classmethod
    def from_yaml(cls, path: str | Path) -> JudgeTemplate:
        data = yaml.safe_load(Path(path).read_text())
        return cls(data["system_template"], data["user_template"])

    def messages(self, **variables: Any) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system.render(**variables).strip()},
            {"role": "user", "content": self.user.render(**variables).strip()},
        ]


def _step_view(step: Any, turn: Any, include_reasoning: bool) -> dict[str, Any]:
    """What the judge may see of one step, copied at once (the agent's objects live on)."""
    response = turn.text or ""
    if include_reasoning and turn.reasoning:
        response = f"<think>\n{turn.reasoning}\n</think>\n\n{response}"
    return {
        "index": step.index,
        "response": response,
        "command": step.action or "",
        "output": step.observation or "",
        "returncode": step.returncode,
        "timed_out": step.timed_out,
        "format_error": step.format_error,
    }


def _capped(view: dict[str, Any], response_cap: int, output_cap: int) -> dict[str, Any]:
    return {
        **view,
        "response": clip(view["response"], response_cap),
        "output": clip(view["output"], output_cap),
    }


# --------------------------------------------------------------------------- judge


class JudgeClient:
    """Talks to the judge endpoint; one per process, its semaphore bounds requests of all episodes."""

    def __init__(self, config: PRMConfig, http: httpx.AsyncClient | None = None) -> None:
        if not config.url:
            raise ValueError("PRM is enabled but no judge URL is set (swe_prm.url / SWE_PRM_URL)")
        self.config = config
        self.url = config.url.rstrip("/") + "/chat/completions"
        self.semaphore = asyncio.Semaphore(config.max_concurrent)
        self.template = JudgeTemplate.from_yaml(config.template)
        self._own_http = http is None
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(config.request_timeout, connect=30.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        self.headers = (
            {"Authorization": f"Bearer {config.api_key.get_secret_value()}"} if config.api_key else {}
        )

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    async def votes(self, messages: list[dict[str, str]]) -> list[Vote]:
        """m votes on one prompt: m parallel requests, or one with ``n=m``."""
        c = self.config
        if c.request_n:
            return await self._request(messages, c.m)
        answers = await asyncio.gather(*(self._request(messages, 1) for _ in range(c.m)))
        return [v for answer in answers for v in answer]

    async def _request(self, messages: list[dict[str, str]], n: int) -> list[Vote]:
        c = self.config
        body: dict[str, Any] = {
            **c.extra_body,
            "model": c.model,
            "messages": messages,
            "temperature": c.temperature,
            "max_tokens": c.max_tokens,
        }
        if n > 1:
            body["n"] = n

        async def attempt() -> list[Vote]:
            async with self.semaphore:
                resp = await self.http.post(
                    self.url, json=body, headers=self.headers or None, timeout=c.request_timeout
                )
            if resp.status_code == 200:
                try:
                    choices = resp.json()["choices"]
                    return [_vote(choice) for choice in choices[:n]]
                except (ValueError, KeyError, TypeError) as exc:
                    return [Vote(error=f"bad response: {type(exc).__name__}: {exc}") for _ in range(n)]
            failure = _JudgeFailed(f"HTTP {resp.status_code}: {resp.text[:300]}")
            raise TryAgain(failure) if resp.status_code >= 500 else failure

        try:
            return await retry_async(
                attempt,
                RetryPolicy(retries=c.retries, backoff=0.5),
                name="judge",
                retryable=lambda exc: isinstance(exc, (httpx.TransportError, httpx.TimeoutException)),
            )
        except _JudgeFailed as exc:
            return [Vote(error=str(exc)) for _ in range(n)]
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            return [Vote(error=f"{type(exc).__name__}: {exc}") for _ in range(n)]


class _JudgeFailed(Exception):
    """The judge answered with an error status (its text is the vote's error)."""


def _vote(choice: dict[str, Any]) -> Vote:
    text = (choice.get("message") or {}).get("content")
    return Vote(score=parse_vote(text), text=text, finish_reason=choice.get("finish_reason"))


class StepJudge:
    """Judges the steps of one episode in the background; pass it to `run_agent` as ``on_step``."""

    def __init__(self, client: JudgeClient, issue: str, repo: str = "") -> None:
        self.client = client
        self.config = client.config
        self.issue = clip(issue or "", self.config.issue_max_chars)
        self.repo = repo
        self.views: list[dict[str, Any]] = []  # every step seen, uncapped (capped when rendered)
        self.judgments: dict[int, StepJudgment] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self._cancelled = False

    def on_step(self, step: Any, turn: Any, submitted: bool) -> None:
        """Called by the agent after each step; returns at once (the judgment runs as a task)."""
        c = self.config
        view = _step_view(step, turn, c.include_reasoning)
        history = self.views[-c.history_steps :] if c.history_steps else []
        omitted = len(self.views) - len(history)
        self.views.append(view)
        judgment = StepJudgment(step=step.index)
        self.judgments[step.index] = judgment
        if submitted and c.skip_submit:
            judgment.status, judgment.reason = "skipped", "submit"
        elif step.action is None:
            judgment.status, judgment.reason = (
                "skipped",
                f"nothing executed: {step.format_error or 'no action'}",
            )
        else:
            self.tasks[step.index] = asyncio.create_task(
                self._judge(judgment, view, history, omitted), name=f"prm-step-{step.index}"
            )

    async def _judge(
        self, judgment: StepJudgment, view: dict[str, Any], history: list[dict[str, Any]], omitted: int
    ) -> None:
        started = time.monotonic()
        c = self.config
        try:
            messages = self.client.template.messages(
                issue=self.issue,
                repo=self.repo,
                omitted=omitted,
                step_number=view["index"] + 1,
                history=[_capped(h, c.history_max_chars, c.history_max_chars) for h in history],
                step=_capped(view, c.response_max_chars, c.observation_max_chars),
            )
            judgment.votes = await self.client.votes(messages)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a judge problem never fails the rollout
            log.warning("PRM judgment of step %d failed: %s", judgment.step, exc)
            judgment.votes = [Vote(error=f"{type(exc).__name__}: {exc}")]
        valid = [v.score for v in judgment.votes if v.score is not None]
        judgment.invalid_votes = sum(1 for v in judgment.votes if v.score is None and v.error is None)
        if valid:
            judgment.status, judgment.score = "scored", sum(valid) / len(valid)
        elif any(v.error is None for v in judgment.votes):
            judgment.status, judgment.reason = "invalid", "no vote had a valid \\boxed{} verdict"
        else:
            judgment.status = "failed"
            judgment.reason = next((v.error for v in judgment.votes if v.error), "no answer")
        judgment.seconds = round(time.monotonic() - started, 3)

    def cancel(self) -> None:
        """Stop every running judgment (the episode is dropped); `finish` still reports them."""
        self._cancelled = True
        for task in self.tasks.values():
            task.cancel()

    async def finish(self, timeout: float | None = None) -> PRMResult:
        """Wait up to ``timeout`` seconds for running judgments, cancel the rest, and report."""
        started = time.monotonic()
        running = [t for t in self.tasks.values() if not t.done()]
        if running:
            _, pending = await asyncio.wait(running, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for j in self.judgments.values():
            if j.status == "pending":
                if self._cancelled:
                    j.status, j.reason = "cancelled", "the episode was dropped"
                else:
                    j.status, j.reason = "timeout", f"not done within {timeout}s of the episode's end"
        steps = [self.judgments[i] for i in sorted(self.judgments)]
        scores = [j.score for j in steps if j.score is not None]
        return PRMResult(
            steps=steps,
            mean=sum(scores) / len(scores) if scores else None,
            scored=len(scores),
            missing=sum(j.status in ("invalid", "failed", "timeout", "cancelled") for j in steps),
            skipped=sum(j.status == "skipped" for j in steps),
            invalid_votes=sum(j.invalid_votes for j in steps),
            wait_seconds=round(time.monotonic() - started, 3),
        )
