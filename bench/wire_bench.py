"""Cost of the wire contract per request: model validation against the JSON parse it follows.

Every request a server takes is parsed (`checks.parse_body`: JSON, depth, NaN, surrogates) and then
validated once by its model (`protocol.parse`). This bench times both, in the same run, for the
bodies the pool sees most (exec, allocate, a batch heartbeat of 1,000 leases, a 1 MiB write_file,
which the pool checks without decoding: `protocol.FORWARDING`), and prints validation's cost as a ratio of the parse (the baseline) and in microseconds.

    python bench/wire_bench.py [--repeat 2000]
"""

from __future__ import annotations

import argparse
import base64
import json
import time
from collections.abc import Callable
from typing import Any

from swe_rl.fleet import protocol
from swe_rl.fleet.checks import parse_body

BODIES: dict[str, tuple[type[Any], dict[str, Any]]] = {
    "exec": (
        protocol.ExecCall,
        {"lease_id": "l" * 22, "command": "cd /testbed && pytest -q tests/test_x.py", "timeout": 180.0},
    ),
    "allocate": (
        protocol.AllocateRequest,
        {
            "image": "swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
            "request_id": "r" * 22,
            "instance_id": "django__django-11099",
            "network": False,
            "memory": "4g",
            "env": {"PYTHONDONTWRITEBYTECODE": "1"},
        },
    ),
    "heartbeat x1000": (protocol.HeartbeatRequest, {"lease_ids": [f"lease-{i:016d}" for i in range(1000)]}),
    "write_file 1MiB": (
        protocol.WriteFileCall,
        {
            "lease_id": "l" * 22,
            "path": "/testbed/x.bin",
            "content_b64": base64.b64encode(bytes(1 << 20)).decode(),
        },
    ),
}


def per_call(fn: Callable[[], Any], repeat: int) -> float:
    """Best of 5 rounds, seconds per call."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - t0) / repeat)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    args = ap.parse_args()
    print(f"{'body':<18}{'parse µs':>10}{'validate µs':>13}{'validate/parse':>16}")
    for name, (model, body) in BODIES.items():
        raw = json.dumps(body).encode()
        repeat = max(10, args.repeat // (100 if len(raw) > 100_000 else 1))
        parsed = parse_body(raw)
        context = protocol.FORWARDING if model is protocol.WriteFileCall else None  # as the pool does

        def parse_raw(raw: bytes = raw) -> Any:
            return parse_body(raw)

        def validate(model: type[Any] = model, body: dict[str, Any] = parsed, context: Any = context) -> Any:
            return protocol.parse(model, body, context)

        t_parse, t_model = per_call(parse_raw, repeat), per_call(validate, repeat)
        print(f"{name:<18}{t_parse * 1e6:>10.1f}{t_model * 1e6:>13.1f}{t_model / t_parse:>16.2f}")


if __name__ == "__main__":
    main()
