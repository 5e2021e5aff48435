"""The model endpoint's check before an eval's first instance: it answers, serves the model, takes the key.

Without it, a typo in ``--api-base`` made every instance end without a patch and the run printed a
real-looking 0%. `check_endpoint` raises `EndpointProblem` (swe-eval: a clear error, exit 4) when

- nothing answers at the address (refused, timed out, not HTTP);
- the endpoint rejects the key (401 / 403 on ``GET /models`` or on the probe below);
- ``GET /models`` lists models and the requested one is not among them (the message lists them);
- the endpoint does not list models (``/models`` answers 404 / 405 / 501, a 5xx, or no ``data`` list:
  some servers and proxies do not implement it) and a one-token chat completion for the model
  (the probe) fails with a 404 (unknown model or path), a 5xx, or no answer.

A probe refused for another reason (a 400 or 422 for its tiny request) is not the run's problem: the
endpoint answered, so the check passes with a warning. The requested name matches a listed id as
given or without its litellm provider prefix (``openai/Qwen/Qwen3-8B`` is served as ``Qwen/Qwen3-8B``).
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["EndpointProblem", "check_endpoint", "served_name"]

PROVIDER_PREFIXES = ("openai/", "hosted_vllm/")
"""litellm provider prefixes the chat policy strips before the name reaches the endpoint."""
NOT_LISTED = (404, 405, 501)
"""Answers of a server that has no ``GET /models``."""


class EndpointProblem(Exception):
    """The endpoint cannot serve this run; the message says why and what to check."""


def served_name(model: str) -> str:
    """The model name as the endpoint receives it (litellm's provider prefix removed)."""
    for prefix in PROVIDER_PREFIXES:
        if model.startswith(prefix):
            return model[len(prefix) :]
    return model


def _key_problem(base: str, resp: httpx.Response) -> EndpointProblem:
    return EndpointProblem(
        f"the endpoint {base} rejects the API key (HTTP {resp.status_code}: {_said(resp)}); "
        "pass the right one with --api-key or SWE_API_KEY"
    )


def _said(resp: httpx.Response) -> str:
    try:
        body: Any = resp.json()
        error = body.get("error") if isinstance(body, dict) else None
        text = error.get("message") if isinstance(error, dict) else error or body
        return str(text)[:200]
    except ValueError:
        return resp.text[:200] or resp.reason_phrase


def _listed_ids(resp: httpx.Response) -> list[str] | None:
    """The model ids of a ``GET /models`` answer; None when it is not a model list."""
    if resp.status_code != 200:
        return None
    try:
        data = resp.json().get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]


def check_endpoint(api_base: str, model: str, api_key: str, timeout: float = 20.0) -> list[str]:
    """Check the endpoint as the module docstring says; returns warnings, raises `EndpointProblem`."""
    base = api_base.rstrip("/")
    name = served_name(model)
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(timeout=timeout, headers=headers) as http:  # env proxies, as litellm uses
        try:
            resp = http.get(f"{base}/models")
        except httpx.HTTPError as exc:
            raise EndpointProblem(
                f"the endpoint {base} does not answer ({type(exc).__name__}: {exc}); "
                "check --api-base (it ends in /v1) and that the server is up"
            ) from None
        if resp.status_code in (401, 403):
            raise _key_problem(base, resp)
        ids = _listed_ids(resp)
        if ids is not None:
            if name in ids or model in ids:
                return []
            shown = ", ".join(ids[:10]) + (" ..." if len(ids) > 10 else "") if ids else "none"
            raise EndpointProblem(
                f"the endpoint {base} does not serve the model {name!r} (it lists: {shown}); "
                f"check --model (e.g. --model openai/{ids[0] if ids else '<name>'})"
            )
        return _probe(http, base, model, name, listed=resp.status_code)


def _probe(http: httpx.Client, base: str, model: str, name: str, listed: int) -> list[str]:
    """No model list: one chat completion of one token says whether the model and key work."""
    why = "has no GET /models" if listed in NOT_LISTED else f"answered GET /models with HTTP {listed}"
    body = {"model": name, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    try:
        resp = http.post(f"{base}/chat/completions", json=body)
    except httpx.HTTPError as exc:
        raise EndpointProblem(
            f"the endpoint {base} {why} and its chat completion does not answer "
            f"({type(exc).__name__}: {exc}); check --api-base and that the server is up"
        ) from None
    if resp.status_code in (401, 403):
        raise _key_problem(base, resp)
    if resp.status_code == 404:
        raise EndpointProblem(
            f"the endpoint {base} {why} and refuses a chat completion for {name!r} with HTTP 404 "
            f"({_said(resp)}): the model is not served there, or --api-base is not the API's /v1"
        )
    if resp.status_code >= 500:
        raise EndpointProblem(
            f"the endpoint {base} {why} and fails a chat completion for {name!r} with HTTP "
            f"{resp.status_code} ({_said(resp)})"
        )
    if resp.status_code >= 400:
        return [
            f"the endpoint {base} {why}; a one-token chat completion for {name!r} was refused with "
            f"HTTP {resp.status_code} ({_said(resp)}): the model's name could not be checked"
        ]
    return []  # the model answered a one-token chat completion
