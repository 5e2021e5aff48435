"""A simulated many-node fleet for load tests (`simulated_fleet`), never deployed: the real exec servers
over the in-memory backend (`swe_rl.fleet.exec.memory_backend`, `SWE_EXEC_BACKEND=memory`) and a real
pool server. Production code never imports this package.
"""
