"""Async client of the pool server: leases of task containers.

Used by the agent, the slime plugin and eval:

    async with EnvClient() as client:
        async with client.lease("swe-rl/base:bookworm", instance_id="x") as env:
            result = await env.exec("pytest -q", timeout=600)

Why it is built this way:
- Errors are typed (`swe_rl.fleet.errors`): every HTTP answer that is not a 200 is mapped onto
  that one tree in one place (`errors.error_for`). Everything under `FleetUnavailable` is the
  fleet's fault: the plugin removes such samples instead of scoring them.
- One contract with the servers: bodies are built from the request models of `swe_rl.fleet.protocol`
  (a mistake is the `BadRequest` the server would answer, before any round trip) and answers are
  parsed into the models of `swe_rl.fleet.responses` (`ExecResult.from_response`, ...; the results
  and the settings live in `client_results` and `client_config`).
- Retries (exponential backoff with jitter) only where repeating is safe:
  allocate (a client-made request id makes it idempotent), heartbeat, diff,
  read_file, close. exec, write_file and evaluate change the container, so they
  are retried only when the request provably never reached the pool, unless
  the caller marks an exec or write_file `idempotent` (safe to run twice).
- `lease()` always closes its lease, on exception and on cancellation too
  (the close is shielded), and heartbeats in the background meanwhile: one request per interval
  for all of a client's leases (`EnvClient.heartbeat_all`), not one per lease, so a pool holding
  20,000 leases answers tens of heartbeat requests a second, not hundreds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from swe_rl.fleet import protocol, responses
from swe_rl.fleet.call_headers import BOOT_HEADER, CALL_ID_HEADER, CREDENTIAL_HEADER, RESENT_HEADER
from swe_rl.fleet.client_config import CLIENT_ENV as CLIENT_ENV  # re-exported: callers import it from here
from swe_rl.fleet.client_config import EnvClientConfig, pool_tls
from swe_rl.fleet.client_results import EvalResult, ExecResult
from swe_rl.fleet.direct_client import NodeNotReached, direct_call, node_wires
from swe_rl.fleet.errors import FleetError, FleetUnavailable, LeaseLost, NetworkFull, TlsRefused, error_for
from swe_rl.fleet.image_protocol import prefetch_body
from swe_rl.fleet.protocol import EVAL_APPLY_ALLOWANCE
from swe_rl.fleet.retry import Retry, RetryPolicy, TryAgain, retry_after_seconds, retry_async
from swe_rl.fleet.snapshot_client import ClientSnapshots, LeaseSnapshots
from swe_rl.fleet.tls import tls_refusal

log = logging.getLogger(__name__)


_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
RESTART_POLL = 0.5
"""Seconds between attempts (drawn from half of it to all) while the pool refuses connections."""
HEARTBEAT_BATCH = 1000  # leases named in one background heartbeat request (the pool accepts 10,000)


# --------------------------------------------------------------------------- lease


class Lease(LeaseSnapshots):
    """One container held from the pool; every call refreshes the lease (`snapshot()`: snapshot_client)."""

    def __init__(self, client: EnvClient, info: dict[str, Any]) -> None:
        lease = responses.LeaseResponse.model_validate(info)
        self.client = client
        self.lease_id, self.node, self.container_id = lease.lease_id, lease.node, lease.container_id
        self.image, self.instance_id, self.workdir = lease.image, lease.instance_id, lease.workdir
        self.expires_at: float = lease.expires_at
        self.credential: str = lease.credential
        """The lease's own credential (every call on it needs it; `lease_credential.py`): not a secret of
        the pool or the nodes, only of this lease."""
        self.credential_expires_at: float = lease.credential_expires_at
        self._credential_life = max(1.0, self.credential_expires_at - time.time())
        self.warm: bool | None = lease.warm
        self.image_id: str = lease.image_id
        """The image's content ID as the node reported it ('': not reported): what the grader keys a
        task's kept clean-tree answers on (`grading.clean_store`)."""
        """Whether the node handed over a pre-started container (None: the pool did not say)."""
        self.closed = False
        self.lost: LeaseLost | None = None
        """Set when the background heartbeat learns the lease is gone."""

    def __repr__(self) -> str:
        return f"Lease({self.lease_id!r}, image={self.image!r}, node={self.node!r})"

    async def _call(self, op: str, body: dict[str, Any], timeout: float, retry: Retry) -> dict[str, Any]:
        credential = await self.current_credential()
        if op in protocol.ROUTED_CALLS and self.client.config.direct and credential and self.node:
            try:
                return await direct_call(  # straight to the node (direct_client.py)
                    self.client._node_wires,
                    self.client.config,
                    self,
                    op,
                    body,
                    credential,
                    timeout=timeout,
                    retry=retry,
                )
            except NodeNotReached as exc:  # nothing ran: the pool knows whether the node is down or draining
                log.info(
                    "%s on lease %s: node %s not reached (%s): via the pool",
                    op,
                    self.lease_id,
                    self.node,
                    exc,
                )
        return await self.client._call(
            op, {"lease_id": self.lease_id, **body}, timeout=timeout, retry=retry, credential=credential
        )

    async def current_credential(self) -> str:
        """The lease's credential, renewed by the pool once under a quarter of its life is left; while the
        pool cannot renew it, the one held serves on until it expires."""
        left = self.credential_expires_at - time.time()
        if self.credential and left < self._credential_life / 4:
            try:
                data = await self.client._call(
                    "credential",
                    {"lease_id": self.lease_id},
                    timeout=self.client.config.read_timeout,
                    retry=Retry.SAFE,
                    credential=self.credential,
                )
            except FleetError as exc:
                if left <= 0:
                    raise
                log.warning("renewing the credential of lease %s failed (kept): %s", self.lease_id, exc)
            else:
                fresh = responses.CredentialResponse.model_validate(data)
                self.credential, self.credential_expires_at = fresh.credential, fresh.credential_expires_at
        return self.credential

    async def exec(
        self,
        command: str,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        max_output_bytes: int | None = None,
        *,
        user: str | None = None,
        separate_stderr: bool = False,
        idempotent: bool = False,
    ) -> ExecResult:
        """Run command; `idempotent=True` lets a severed call be sent again (the command may then run twice)."""
        timeout = timeout or self.client.config.exec_timeout
        body = _body(
            "exec",
            protocol.ExecCall,
            command=command,
            timeout=timeout,
            workdir=workdir,
            env=env,
            max_output_bytes=max_output_bytes,
            user=user,
            separate_stderr=separate_stderr,
        )
        data = await self._call(
            "exec", body, timeout + self.client.config.call_margin, Retry.SAFE if idempotent else Retry.UNSENT
        )
        return ExecResult.from_response(data)

    async def diff(self, base: str | None = None) -> str:
        """`git diff` of the workdir against base (HEAD), new files included."""
        body = _body("diff", protocol.DiffCall, base=base)
        data = await self._call("diff", body, self.client.config.read_timeout, Retry.SAFE)
        return responses.DiffResponse.model_validate(data).text()

    async def record_baseline(self) -> str:
        """Record the work tree as it is now (untracked build output of the image's install, ...);
        every later `diff` leaves exactly that out. Call once, before the first action."""
        body = _body("diff", protocol.DiffCall, record_baseline=True)
        data = await self._call("diff", body, self.client.config.read_timeout, Retry.SAFE)
        return responses.DiffResponse.model_validate(data).baseline

    async def write_file(
        self, path: str, data: str | bytes, mode: int | None = None, *, idempotent: bool = False
    ) -> None:
        """Write a file (parents created); `idempotent=True` retries a severed call (same bytes, same path)."""
        content, mode = data if isinstance(data, bytes) else data.encode(), 0o644 if mode is None else mode
        body = _body("write_file", protocol.WriteFileCall, path=path, content=content, mode=mode)
        await self._call(
            "write_file", body, self.client.config.read_timeout, Retry.SAFE if idempotent else Retry.UNSENT
        )

    async def read_file(self, path: str) -> bytes:
        body = _body("read_file", protocol.ReadFileCall, path=path)
        data = await self._call("read_file", body, self.client.config.read_timeout, Retry.SAFE)
        return responses.ReadFileResponse.model_validate(data).data()

    async def evaluate(self, patch: str, eval_script: str, timeout: float | None = None) -> EvalResult:
        """Apply patch in the workdir and run eval_script; the test log is returned, not judged."""
        timeout = timeout or self.client.config.eval_timeout
        data = await self._call(
            "evaluate",
            _body("evaluate", protocol.EvaluateCall, patch=patch, eval_script=eval_script, timeout=timeout),
            timeout + EVAL_APPLY_ALLOWANCE + self.client.config.call_margin,
            Retry.UNSENT,
        )
        return EvalResult.from_response(data)

    async def heartbeat(self) -> float:
        """Extend the lease; returns its new expiry (epoch seconds)."""
        data = await self._call("heartbeat", {}, self.client.config.read_timeout, Retry.SAFE)
        self.expires_at = responses.HeartbeatResponse.model_validate(data).expires_at
        return self.expires_at

    def start_heartbeat(self, interval: float | None = None) -> None:
        """Heartbeat in the background until close (lease() does this for you), batched with the
        client's other leases; the client beats at the shortest interval any of its leases asked for."""
        if not self.closed and self.lost is None:
            self.client._watch(self, interval or self.client.config.heartbeat_interval)

    async def close(self) -> None:
        """Release the container; idempotent. A failed close is left to the pool's TTL."""
        self.client._unwatch(self)
        if self.closed:
            return
        self.closed = True
        await self.client._call(
            "close",
            {"lease_id": self.lease_id},
            timeout=self.client.config.read_timeout,
            retry=Retry.SAFE,
            credential=self.credential,
        )


# --------------------------------------------------------------------------- client


class EnvClient(ClientSnapshots):
    """Talks to one pool server; share one per process. `owner` (default random): see snapshot_client."""

    def __init__(self, config: EnvClientConfig | None = None, *, owner: str | None = None) -> None:
        self.config = config or EnvClientConfig.from_env()
        self.owner = owner or secrets.token_urlsafe(12)
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        self._urls = self.config.pool_urls()
        """The pool's replicas (one URL for one pool process); calls go to `_urls[_current]`."""
        self._current = 0
        self._http = httpx.AsyncClient(
            headers=headers,
            verify=pool_tls(self.config),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            timeout=httpx.Timeout(self.config.read_timeout, connect=self.config.connect_timeout),
        )
        self._node_wires = node_wires(self.config)
        """The connections of direct calls to the nodes (they carry no pool token)."""
        self._background: set[asyncio.Task[Any]] = set()
        self._pool_boot: str | None = None  # the pool process that answered last (call_headers.BOOT_HEADER)
        self._watched: dict[str, Lease] = {}  # leases heartbeated in the background, by lease id
        self._beat_interval = self.config.heartbeat_interval
        self._beat_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._beat_task is not None:
            self._beat_task.cancel()
            await asyncio.gather(self._beat_task, return_exceptions=True)
        if self._background:  # closes still under way (e.g. after a cancellation) finish first
            await asyncio.wait(list(self._background), timeout=self.config.read_timeout)
        await self._http.aclose()
        self._node_wires.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def allocate(
        self, image: str, *, instance_id: str | None = None, request_id: str | None = None, **opts: Any
    ) -> Lease:
        """Lease a container of image (opts: network, memory, cpus, pids_limit, workdir, env, from_snapshot).

        Retries until the allocate deadline while the fleet is full or unavailable; does not
        heartbeat (use `lease()` for that, or `Lease.start_heartbeat()`).
        """
        request_id = request_id or secrets.token_urlsafe(16)
        body = _body(
            "allocate",
            protocol.AllocateRequest,
            image=image,
            request_id=request_id,
            instance_id=instance_id,
            owner=self.owner,
            **opts,
        )
        try:
            data = await self._call("allocate", body, timeout=self.config.read_timeout, retry=Retry.ALLOCATE)
        except asyncio.CancelledError:  # the pool may still create it: release it by request id
            self._spawn(self._close_quietly({"request_id": request_id}))
            raise
        return Lease(self, data)

    @contextlib.asynccontextmanager
    async def lease(self, image: str, *, instance_id: str | None = None, **opts: Any) -> AsyncIterator[Lease]:
        """A heartbeated lease that is closed on exit, whatever the exit."""
        env = await self.allocate(image, instance_id=instance_id, **opts)
        env.start_heartbeat()
        try:
            yield env
        finally:
            task = self._spawn(self._close_quietly(env))
            await asyncio.shield(task)  # if cancelled again, the close still completes in the background

    async def _close_quietly(self, target: Lease | dict[str, Any]) -> None:
        try:
            if isinstance(target, Lease):
                await target.close()
            else:
                await self._call("close", target, timeout=self.config.read_timeout, retry=Retry.SAFE)
        except FleetError as exc:
            log.warning("close of %s failed (the pool reclaims it after its TTL): %s", target, exc)

    # ---- heartbeats, one request per interval for every lease of this client

    def _watch(self, lease: Lease, interval: float) -> None:
        self._watched[lease.lease_id] = lease
        self._beat_interval = min(self._beat_interval, interval)
        if self._beat_task is None or self._beat_task.done():
            self._beat_task = asyncio.create_task(self._heartbeat_loop())

    def _unwatch(self, lease: Lease) -> None:
        self._watched.pop(lease.lease_id, None)

    async def _heartbeat_loop(self) -> None:
        while self._watched:
            await asyncio.sleep(self._beat_interval)
            await self.heartbeat_all()

    async def heartbeat_all(self) -> int:
        """Extend every background-heartbeated lease, `HEARTBEAT_BATCH` per request; returns how many.

        A lease the pool no longer knows, or whose container is gone, gets `Lease.lost` and leaves the
        batch; a failed request is only logged (transient: the pool's TTL spans several intervals).
        """
        leases = list(self._watched.values())
        extended = 0
        for start in range(0, len(leases), HEARTBEAT_BATCH):
            batch = leases[start : start + HEARTBEAT_BATCH]
            body = {"lease_ids": [lease.lease_id for lease in batch]}
            try:
                data = await self._call("heartbeat", body, timeout=self.config.read_timeout, retry=Retry.SAFE)
            except FleetError as exc:
                log.warning("heartbeat of %d leases failed: %s", len(batch), exc)
                continue
            beat = responses.HeartbeatResponse.model_validate(data)
            gone = {lease_id: "unknown or expired lease" for lease_id in beat.unknown}
            gone.update(beat.lost)
            for lease in batch:
                reason = gone.get(lease.lease_id)
                if lease.lease_id not in self._watched:  # closed while the request was out
                    continue
                if reason is None:
                    lease.expires_at = beat.expires_at
                    extended += 1
                    continue
                lease.lost = LeaseLost(f"heartbeat: lease {lease.lease_id}: {reason}", status=410)
                self._unwatch(lease)
                log.warning("lease %s lost: %s", lease.lease_id, reason)
        return extended

    async def status(self) -> dict[str, Any]:
        return await self._call("status", None, timeout=self.config.read_timeout, retry=Retry.SAFE)

    async def prefetch(self, images: Mapping[str, int] | list[str]) -> dict[str, Any]:
        """Hint the images of the next instances (image -> leases expected); nodes pull them ahead."""
        body = prefetch_body(images)
        return await self._call("prefetch", body, timeout=self.config.read_timeout, retry=Retry.SAFE)

    def _next_replica(self, failed: str) -> None:
        """The replica at `failed` did not answer: later calls go to the next one (unless another call
        moved on already). One URL: nothing changes."""
        if len(self._urls) > 1 and self._urls[self._current] == failed:
            self._current = (self._current + 1) % len(self._urls)
            log.warning("pool replica %s failed: calls go to %s", failed, self._urls[self._current])

    async def _call(
        self, op: str, body: dict[str, Any] | None, *, timeout: float, retry: Retry, credential: str = ""
    ) -> dict[str, Any]:
        """One pool call with the retry policy of its kind (and the lease's credential, for a call on a
        lease); raises a FleetError subclass."""
        http_timeout = httpx.Timeout(timeout, connect=self.config.connect_timeout)
        cfg = self.config
        loop = asyncio.get_running_loop()
        refused_until = loop.time() + cfg.restart_grace
        failures = 0  # attempts that count against `retries` (not refused connections)
        headers = {CALL_ID_HEADER: secrets.token_urlsafe(16)} if retry is Retry.UNSENT else {}  # call replay
        if credential:
            headers[CREDENTIAL_HEADER] = credential
        sent_to = self._pool_boot  # the pool instance this call first goes to, as far as we know

        async def attempt() -> dict[str, Any]:
            nonlocal failures
            base = self._urls[self._current]
            try:
                if body is None:
                    resp = await self._http.get(f"{base}/{op}", timeout=http_timeout)
                else:
                    resp = await self._http.post(
                        f"{base}/{op}", json=body, timeout=http_timeout, headers=headers
                    )
            except httpx.HTTPError as exc:
                refusal = tls_refusal(exc)
                if refusal is not None:  # a setting (the CA, the URL's scheme): retrying only hides it
                    raise TlsRefused(
                        f"{op}: TLS with pool {cfg.pool_url} failed: {refusal} (its certificate must come "
                        "from the CA in SWE_CLIENT_CA_FILE and name the URL's host)"
                    ) from exc
                error: FleetError = FleetUnavailable(
                    f"{op}: pool {base} unreachable or too slow: {type(exc).__name__}: {exc}"
                )
                error.__cause__ = exc
                self._next_replica(base)  # with replicas, the next attempt goes to another one
                if isinstance(exc, httpx.ConnectError) and loop.time() < refused_until:
                    # nobody listens (a pool restarting, a replica gone): the request never left; poll
                    # until one is back (each replica in turn)
                    raise TryAgain(error, RESTART_POLL * random.uniform(0.5, 1.0) / len(self._urls)) from exc
                failures += 1
                if retry is Retry.UNSENT and not isinstance(exc, _NEVER_SENT):
                    if sent_to is None:
                        raise error from exc  # it may have run, and no pool instance to ask: not ours to repeat
                    headers[RESENT_HEADER] = sent_to  # the pool runs it only if it never saw it
                if retry is not Retry.ALLOCATE and failures > cfg.retries:
                    raise error from exc
                raise TryAgain(error) from exc
            self._pool_boot = resp.headers.get(BOOT_HEADER, self._pool_boot)
            data = _json_or_text(resp)
            if resp.status_code == 200:
                return data
            error = error_for(op, resp.status_code, data)
            if retry is Retry.ALLOCATE:
                if resp.status_code == 429:
                    raise TryAgain(error, retry_after_seconds(resp.headers.get("retry-after")))
                if resp.status_code >= 500 and not isinstance(error, NetworkFull):  # that one: at once
                    raise TryAgain(error)
            elif retry is Retry.SAFE and resp.status_code in (502, 503, 504) and not data.get("node_down"):
                failures += 1
                if failures <= cfg.retries:
                    raise TryAgain(error)
            raise error

        if retry is Retry.ALLOCATE:
            policy = RetryPolicy(
                retries=None,
                deadline=cfg.allocate_deadline,
                backoff=cfg.backoff,
                backoff_max=cfg.backoff_max,
                jitter=True,
            )
        else:  # `retries` is counted by attempt(), so that refused connections do not use it up
            policy = RetryPolicy(
                retries=None,
                deadline=cfg.restart_grace + cfg.retries * cfg.backoff_max + 1.0,
                backoff=cfg.backoff,
                backoff_max=cfg.backoff_max,
                jitter=True,
            )
        return await retry_async(attempt, policy, name=op)


def _body(op: str, model: type[BaseModel], **fields: Any) -> dict[str, Any]:
    """A request body built from its protocol model; a mistake is the `BadRequest` the server would give."""
    try:
        request = model(**fields)
    except ValidationError as exc:
        raise error_for(op, 400, protocol.refusal(exc).body()) from None
    return request.wire() if isinstance(request, protocol.WriteFileCall) else protocol.wire(request)


def _json_or_text(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        data = None
    return data if isinstance(data, dict) else {"error": resp.text[:500]}
