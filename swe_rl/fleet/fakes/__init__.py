"""Stand-ins for load tests of the fleet, never deployed: an in-memory Docker client
(`docker_client`), an exec server over it (`exec_server`) and a simulated many-node fleet
(`simulated_fleet`). Production code never imports this package; it injects the fake into
the real exec server instead.
"""
