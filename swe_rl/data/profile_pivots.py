#!/usr/bin/env python3
"""Keep the informative pivots: those a frozen reference policy sometimes gets right and sometimes not.

For every pivot row (``data/build_pivot_dataset.py`` output) it samples ``--k`` actions from an
OpenAI-compatible chat endpoint (the reference policy), scores each with the pivot reward
(`swe_rl.rewards.pivot`, settings from ``--reward-config``, the plugin YAML's ``swe_pivot``), and
keeps the row when the outcomes are mixed — at least one match and one miss — and the mean
score is below ``--max-mean``. Kept rows get ``metadata.pivot.profile``::

    {"k": 8, "matches": 3, "pass_rate": 0.375, "mean_score": 0.375,
     "categories": {"match": 3, "mismatch": 4, "no_action": 1}, "model": "..."}

    python data/profile_pivots.py ~/data/pivots/train.jsonl --output ~/data/pivots/train.informative.jsonl \\
        --api-base http://10.0.0.5:30000/v1 --model qwen3-30b-a3b-thinking --k 8 --concurrency 64

Resumable: each profiled row is appended to ``<output>.profile.jsonl`` as it finishes; a new run
skips the rows found there (same pivot id and k) and only asks for the rest. A row whose requests
kept failing is not recorded (it is tried again next time) and counts as an error, never as a 0.
``--concurrency`` bounds the requests in flight. A progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

import httpx
import yaml

from swe_rl.rewards.pivot import (
    ExpertAction,
    PivotCategory,
    PivotRewardConfig,
    score_turn,
)


def row_id(row: dict[str, Any]) -> str:
    pivot = row["metadata"]["pivot"]
    if pivot.get("pivot_id"):
        return str(pivot["pivot_id"])
    blob = json.dumps(
        {"m": pivot["messages"], "t": pivot.get("tools"), "a": pivot["expected_action"]},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def reward_config(path: str | None) -> PivotRewardConfig:
    """``swe_pivot`` of a plugin YAML, or a YAML mapping of `PivotRewardConfig` fields; defaults without."""
    if not path:
        return PivotRewardConfig()
    data = yaml.safe_load(Path(path).read_text()) or {}
    return PivotRewardConfig(**(data.get("swe_pivot", data) if isinstance(data, dict) else {}))


class Progress:
    """tqdm when installed, else a line now and then."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.enabled, self.last = total, 0, enabled, 0.0
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc="profiling", unit="pivot", file=sys.stderr)
            except ImportError:
                pass

    def update(self, **postfix: Any) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(postfix, refresh=False)
        elif self.enabled and (time.monotonic() - self.last > 5 or self.done == self.total):
            self.last = time.monotonic()
            print(f"profiling: {self.done}/{self.total} {postfix}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Profiler:
    def __init__(self, args: argparse.Namespace, cfg: PivotRewardConfig, http: httpx.AsyncClient) -> None:
        self.args, self.cfg, self.http = args, cfg, http
        self.requests = asyncio.Semaphore(max(1, args.concurrency))
        self.url = args.api_base.rstrip("/") + "/chat/completions"
        key = args.api_key or os.environ.get("SWE_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.extra = json.loads(args.extra_body) if args.extra_body else {}

    async def _complete(self, pivot: dict[str, Any]) -> dict[str, Any]:
        messages = pivot["messages"]
        if self.args.drop_reasoning:
            messages = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in messages]
        body: dict[str, Any] = {
            "model": self.args.model,
            "messages": messages,
            "temperature": self.args.temperature,
            "max_tokens": self.args.max_tokens,
            **self.extra,
        }
        if self.args.top_p is not None:
            body["top_p"] = self.args.top_p
        if pivot.get("tools"):
            body["tools"] = pivot["tools"]
        delay, error = 1.0, ""
        for attempt in range(self.args.retries + 1):
            async with self.requests:
                try:
                    resp = await self.http.post(self.url, json=body, headers=self.headers)
                except httpx.HTTPError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                else:
                    if resp.status_code == 200:
                        return resp.json()["choices"][0]["message"]
                    error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                    if resp.status_code < 500 and resp.status_code != 429:
                        break
            if attempt < self.args.retries:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise RuntimeError(error)

    async def profile(self, row: dict[str, Any]) -> dict[str, Any]:
        pivot = row["metadata"]["pivot"]
        expert = ExpertAction.from_any(pivot["expected_action"])
        cfg = self.cfg.model_copy(update={"workdir": pivot["workdir"]}) if pivot.get("workdir") else self.cfg
        messages = await asyncio.gather(*(self._complete(pivot) for _ in range(self.args.k)))
        scores = [
            score_turn(
                m.get("content") or "",
                expert,
                cfg,
                harness=pivot.get("harness", "bash_block"),
                tools=pivot.get("tools"),
                tool_calls=m.get("tool_calls"),
            )
            for m in messages
        ]
        return {
            "pivot_id": row_id(row),
            "k": self.args.k,
            "model": self.args.model,
            "scores": [s.score for s in scores],
            "categories": [s.category.value for s in scores],
        }


def summary(record: dict[str, Any]) -> dict[str, Any]:
    scores, categories = record["scores"], record["categories"]
    matches = sum(1 for c in categories if c == PivotCategory.MATCH.value)
    return {
        "k": record["k"],
        "matches": matches,
        "pass_rate": matches / len(scores),
        "mean_score": sum(scores) / len(scores),
        "categories": dict(Counter(categories)),
        "model": record["model"],
    }


def informative(profile: dict[str, Any], max_mean: float) -> bool:
    return 0 < profile["matches"] < profile["k"] and profile["mean_score"] < max_mean


def load_cache(path: Path, k: int) -> dict[str, dict[str, Any]]:
    cache: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of an interrupted run
            if record.get("k") == k and len(record.get("scores", [])) == k:
                cache[record["pivot_id"]] = record
    return cache


async def profile_rows(
    args: argparse.Namespace, todo: list[dict[str, Any]], cache: dict[str, dict[str, Any]], out: TextIO
) -> Counter:
    """Profile `todo`, adding each record to `cache` and appending it to `out` as it finishes; errors by type."""
    progress = Progress(len(todo), not args.no_progress)
    errors: Counter = Counter()
    queue: asyncio.Queue = asyncio.Queue()
    for row in todo:
        queue.put_nowait(row)
    timeout = httpx.Timeout(args.request_timeout, connect=30.0)
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        profiler = Profiler(args, reward_config(args.reward_config), http)

        async def worker() -> None:
            while not queue.empty():
                row = queue.get_nowait()
                try:
                    record = await profiler.profile(row)
                except Exception as exc:  # noqa: BLE001 - the endpoint failed: retried next run
                    errors[type(exc).__name__] += 1
                    if sum(errors.values()) <= 5:
                        print(f"error on pivot {row_id(row)}: {exc}", file=sys.stderr)
                    progress.update(errors=sum(errors.values()))
                    continue
                cache[record["pivot_id"]] = record
                out.write(json.dumps(record) + "\n")  # a short line into the OS buffer: no need for a thread
                out.flush()
                progress.update(pass_rate=round(summary(record)["pass_rate"], 2))

        await asyncio.gather(*(worker() for _ in range(max(1, min(args.concurrency, len(todo))))))
    progress.close()
    return errors


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = [json.loads(line) for line in args.input.read_text(encoding="utf-8").splitlines() if line.strip()]
    cache_path = Path(f"{args.output}.profile.jsonl")
    cache = load_cache(cache_path, args.k)
    todo = [r for r in rows if row_id(r) not in cache]
    if args.limit is not None:
        todo = todo[: args.limit]
    if cache_path.exists() and cache_path.stat().st_size:  # end a torn line before appending
        with cache_path.open("rb+") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    with cache_path.open("a", encoding="utf-8") as out:
        errors = asyncio.run(profile_rows(args, todo, cache, out))

    kept, profiled = [], 0
    rates: Counter = Counter()
    for row in rows:
        record = cache.get(row_id(row))
        if record is None:
            continue
        profiled += 1
        profile = summary(record)
        rates[f"{profile['matches']}/{profile['k']}"] += 1
        if informative(profile, args.max_mean):
            row["metadata"]["pivot"]["profile"] = profile
            kept.append(row)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w", encoding="utf-8") as fh:
        for row in kept:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {
        "rows": len(rows),
        "profiled": profiled,
        "kept": len(kept),
        "errors": dict(errors),
        "matches_of_k": dict(sorted(rates.items(), key=lambda kv: int(kv[0].split("/")[0]))),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("input", type=Path, help="pivot rows (JSONL)")
    p.add_argument("--output", type=Path, required=True, help="informative rows (JSONL)")
    p.add_argument(
        "--api-base", default=os.environ.get("SWE_API_BASE"), help="OpenAI-compatible base URL (…/v1)"
    )
    p.add_argument("--api-key", default=None, help="bearer token (default: SWE_API_KEY / OPENAI_API_KEY)")
    p.add_argument("--model", default="default", help="model name sent to the endpoint")
    p.add_argument("--k", type=int, default=8, help="actions sampled per pivot")
    p.add_argument("--max-mean", type=float, default=0.75, help="keep pivots whose mean score is below this")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument("--extra-body", default=None, help="JSON merged into each request, e.g. '{\"top_k\": 20}'")
    p.add_argument(
        "--drop-reasoning", action="store_true", help="send earlier turns without reasoning_content"
    )
    p.add_argument(
        "--reward-config", default=None, help="plugin YAML (its swe_pivot) or a PivotRewardConfig YAML"
    )
    p.add_argument("--request-timeout", type=float, default=600.0)
    p.add_argument(
        "--retries", type=int, default=3, help="retries of a request that failed to connect, 429 or 5xx"
    )
    p.add_argument("--limit", type=int, default=None, help="profile at most this many new rows in this run")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if not args.api_base:
        p.error("--api-base (or SWE_API_BASE) is required")
    if args.k < 2:
        p.error("--k must be at least 2 for outcomes to be mixed")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.input.exists():
        print(f"error: no such input: {args.input}", file=sys.stderr)
        return 2
    stats = run(args)
    print(json.dumps(stats))
    return 0 if not stats["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
