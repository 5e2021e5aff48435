"""The real exec server over the in-memory Docker client, for load tests only (no containers at all).

    SWE_EXEC_TOKEN=t python -m swe_rl.fleet.fakes.exec_server --port 5000

Same flags and `SWE_EXEC_*` settings as `swe-exec-server`, plus those of `docker_client`
(`SWE_EXEC_FAKE_LATENCY_MS`, `SWE_EXEC_FAKE_IMAGES`). `/healthz` reports `backend: memory`
and the log says loudly what it is.
"""

from __future__ import annotations

import logging

from swe_rl.fleet.exec.app import parse_config, serve
from swe_rl.fleet.fakes.docker_client import FakeDockerClient

log = logging.getLogger("swe_exec_server")


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(argv)
    cfg.backend = "memory"
    for _ in range(3):
        log.warning("in-memory backend: NO CONTAINERS, commands are not run (load tests only)")
    serve(cfg, client=FakeDockerClient.from_env())


if __name__ == "__main__":
    main()
