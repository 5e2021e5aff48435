"""The pool server: leases of containers over a fleet of exec servers (runs on the GPU head node, port 18090).

`app` is the HTTP face and `main()`; `pool` the lease logic; `placement` its pure decisions.
"""

__version__ = "0.1.0"
