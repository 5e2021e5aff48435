"""Pool server entry point kept for `python server/pool_server.py`: the code is swe_rl/fleet/pool/."""
from swe_rl.fleet.pool.app import main
main()
