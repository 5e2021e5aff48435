"""`OpenAIChatPolicy`: any OpenAI-compatible chat endpoint (SGLang, vLLM, hosted APIs) via litellm.

    policy = OpenAIChatPolicy(OpenAIChatConfig(model="Qwen/Qwen3-8B", api_base="http://127.0.0.1:30000/v1"))
    turn = await policy.act(messages)       # turn.text, turn.reasoning, turn.usage, turn.finish_reason

Thinking returned apart from the content (``reasoning_content``) is kept on the turn;
the harness keeps it in the history and it is sent back as is, so a thinking-preserving
chat template on the server sees earlier thinking. ``top_k`` and other non-OpenAI
sampling parameters go in the request body (``extra_body``). The model is registered
with litellm at zero cost, so models without a price entry work. litellm is imported
on the first policy built (it is slow to import and only the ``eval`` extra has it).

A failed call is raised as the agent's typed `PolicyError` (`policy_error_for`), so the loop and eval
tell an outage from the policy's own failure: no answer, a timeout, a 5xx or 429 after litellm's
retries, a rejected key (401/403) or a model the endpoint does not serve (404) are
`PolicyUnreachable` (the endpoint or its set-up failed: eval records the instance as ``env_error``
and grades nothing); a prompt over the context window is `ContextExhausted`; any other refusal
(4xx) is `PolicyBadResponse`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swe_rl.agent.errors import ContextExhausted, PolicyBadResponse, PolicyError, PolicyUnreachable
from swe_rl.agent.protocols import Message, PolicyTurn, TokenUsage

__all__ = ["OpenAIChatConfig", "OpenAIChatPolicy", "policy_error_for"]


class OpenAIChatConfig(BaseModel):
    """Endpoint and sampling of an OpenAI-compatible chat model; `from_env` reads `SWE_OPENAI_<FIELD>`."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    model: str
    """Model name as the endpoint knows it (e.g. ``Qwen/Qwen3-8B``)."""
    api_base: str | None = None
    """Endpoint URL ending in ``/v1``; None for the provider's default."""
    api_key: str = Field(default="EMPTY", repr=False)
    """API key (local servers accept any)."""
    provider: str = "openai"
    """litellm provider; ``openai`` speaks plain OpenAI chat to api_base."""
    temperature: float | None = 1.0
    """Sampling temperature; None leaves it to the server."""
    top_p: float | None = None
    """Nucleus sampling; None leaves it to the server."""
    top_k: int | None = None
    """Top-k sampling (sent in the request body; SGLang and vLLM read it)."""
    max_tokens: int | None = None
    """Most tokens per turn, thinking included; None leaves it to the server."""
    timeout: float = 600.0
    """Seconds one request may take."""
    retries: int = 2
    """Retries of a failed request (connection errors, 429, 5xx), done by litellm."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """More request-body fields (e.g. ``{"chat_template_kwargs": {"enable_thinking": true}}``)."""

    @classmethod
    def from_env(cls, **overrides: Any) -> OpenAIChatConfig:
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            env = os.environ.get(f"SWE_OPENAI_{name.upper()}")
            if env is not None and name != "extra_body":
                values[name] = env
        return cls(**{**values, **overrides})


def _litellm() -> Any:
    # Without this, importing litellm fetches its price list over the network.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


class OpenAIChatPolicy:
    """Calls the chat endpoint once per turn; safe to share across concurrent episodes."""

    def __init__(self, config: OpenAIChatConfig) -> None:
        self.config = config
        self._litellm = _litellm()
        key = f"{config.provider}/{config.model}"
        if key not in self._litellm.model_cost:  # no price entry: register it free, cost tracking stays quiet
            self._litellm.register_model(
                {
                    key: {
                        "input_cost_per_token": 0.0,
                        "output_cost_per_token": 0.0,
                        "cache_creation_input_token_cost": 0.0,
                        "cache_read_input_token_cost": 0.0,
                        "litellm_provider": config.provider,
                        "mode": "chat",
                    }
                }
            )

    def request_kwargs(self, messages: list[Message], **overrides: Any) -> dict[str, Any]:
        """The keyword arguments of the litellm call (without the messages' copy)."""
        c = self.config
        kwargs: dict[str, Any] = {
            "model": c.model,
            "custom_llm_provider": c.provider,
            "messages": messages,
            "api_key": c.api_key,
            "timeout": c.timeout,
            "num_retries": c.retries,
        }
        if c.api_base:
            kwargs["api_base"] = c.api_base
        for name in ("temperature", "top_p", "max_tokens"):
            if getattr(c, name) is not None:
                kwargs[name] = getattr(c, name)
        extra = dict(c.extra_body)
        if c.top_k is not None:
            extra["top_k"] = c.top_k
        if extra:
            kwargs["extra_body"] = extra
        kwargs.update(overrides)
        if kwargs.get("tools"):
            # plain function tools: skip litellm's MCP-tool handling (it needs the optional `mcp` package)
            kwargs.setdefault("_skip_mcp_handler", True)
        return kwargs

    async def act(self, messages: list[Message], **kwargs: Any) -> PolicyTurn:
        """One chat completion; kwargs (e.g. ``tools``, a tool-calling harness's schemas) are passed to litellm,
        and the answer's ``tool_calls`` come back on the turn."""
        started = time.monotonic()
        try:
            response = await self._litellm.acompletion(**self.request_kwargs(messages, **kwargs))
        except Exception as exc:
            typed = policy_error_for(exc, self._litellm)
            if typed is None:
                raise
            raise typed from exc
        choice = response.choices[0]
        message = choice.message
        usage = getattr(response, "usage", None)
        details = getattr(usage, "completion_tokens_details", None)
        tool_calls = getattr(message, "tool_calls", None)
        return PolicyTurn(
            text=message.content or "",
            reasoning=getattr(message, "reasoning_content", None) or None,
            finish_reason=choice.finish_reason,
            usage=TokenUsage(
                prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                reasoning_tokens=getattr(details, "reasoning_tokens", 0) or 0,
                calls=1,
            ),
            tool_calls=[tc.model_dump() if hasattr(tc, "model_dump") else dict(tc) for tc in tool_calls]
            if tool_calls
            else None,
            latency=time.monotonic() - started,
            extra={"response_id": getattr(response, "id", None)},
        )


# status codes of an endpoint that cannot serve this run at all (key, model): its set-up, not the policy
_SETUP_STATUSES = (401, 403, 404)


def policy_error_for(exc: Exception, litellm: Any) -> PolicyError | None:
    """The agent's typed error for a failed litellm call (None: not a call failure, raised as it is).

    litellm reports a refused connection as ``InternalServerError`` (and its retries are done by
    then), so every 5xx, 429, timeout and connection failure is `PolicyUnreachable`, as are a
    rejected key and an unknown model: the run's infrastructure, not a turn the policy got wrong."""
    what = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, litellm.ContextWindowExceededError):
        return ContextExhausted(what)
    status = getattr(exc, "status_code", None)
    outage = (litellm.APIConnectionError, litellm.Timeout, litellm.RateLimitError)
    if isinstance(exc, outage) or (isinstance(status, int) and (status >= 500 or status in _SETUP_STATUSES)):
        return PolicyUnreachable(f"policy endpoint failed: {what}")
    if isinstance(exc, litellm.APIError) or isinstance(status, int):
        return PolicyBadResponse(what)
    return None
