"""The fleet: Docker containers for SWE tasks, served over HTTP.

Three parts speak one wire contract (`swe_rl.fleet.protocol`):

- exec (`swe_rl.fleet.exec`): runs on every Docker node and owns that node's task containers
  (create, exec, files, diff, evaluate, warm pools, the reaper);
- pool: runs on the head node and spreads leases over the exec servers;
- client: what the agent and slime's agent layer use to lease and drive containers.

Shared by all three and by the rest of swe_rl: `settings` (every env-configured object is read by
it: `SWE_EXEC_*`, `SWE_POOL_*`, `SWE_CLIENT_*`, ...) and `retry` (the one retry loop of the HTTP
clients).

The package installs alone on a Docker node (`pip install "swe-rl[server]"`): nothing in it
imports the agent, grading or training code of `swe_rl` (tests/fleet/test_imports.py checks).
"""
