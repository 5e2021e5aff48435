"""The headers of call replay (swe_rl/fleet/pool/call_replay.py), shared by the client and the pool, and
the two of the pool's per-call latency (a node's own time, the pool's overhead).

A call that changes a container is named, so that one cut after it left can be sent again and still
run once; docs/fleet.md, "A cut call is sent again".
"""

CALL_ID_HEADER = "x-swe-call-id"
"""The client's name for one call (random, the same on every send of that call)."""
RESENT_HEADER = "x-swe-call-resent"
"""On a call sent again: the pool instance (`BOOT_HEADER`) the client saw before it first sent it."""
BOOT_HEADER = "x-swe-pool-boot"
"""On every pool answer: this pool process's instance id (new at each start)."""
NODE_SECONDS_HEADER = "x-swe-node-seconds"
"""On every exec server answer: seconds from the request's arrival to its answer, as the node saw them."""
POOL_OVERHEAD_HEADER = "x-swe-pool-overhead-seconds"
"""On a routed call's answer: the pool's own time for it (its handling minus the node's reported time)."""
NODE_WAIT_HEADER = "x-swe-pool-node-wait-seconds"
"""On a routed call's answer: seconds the pool waited for the node (from sending to the answer read), the
transit and any queue at the node included."""
POOL_OWN_HEADER = "x-swe-pool-own-seconds"
"""On a routed call's answer: the pool's handling minus `NODE_WAIT_HEADER`: its own work and its event
loop's lag, without the node's queue or the transit that `POOL_OVERHEAD_HEADER` counts as the pool's."""
CREDENTIAL_HEADER = "x-swe-lease-credential"
"""On a call to the pool on a lease: that lease's credential (swe_rl/fleet/lease_credential.py)."""
LEASE_SCHEME = "Lease "
"""A direct call to a node authorizes with ``Authorization: Lease <credential>`` (not the node's token)."""
