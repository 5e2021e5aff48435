"""The shared lease record on a real PostgreSQL (Debian's server, started for the test): what the pool
replicas rely on. No Docker, no HTTP: two `SharedLeaseStore`s on one database are two replicas."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from swe_rl.fleet.pool.config import PoolConfig
from swe_rl.fleet.pool.store import LeaseRecord, LeaseStore
from swe_rl.fleet.protocol import ApiError
from tests.conftest import free_port

pytest.importorskip("psycopg", reason="the `replicas` extra (psycopg) is not installed")
from swe_rl.fleet.pool.shared_store import SharedLeaseStore


@pytest.fixture
def stores(postgres_url: str) -> Iterator[tuple[SharedLeaseStore, SharedLeaseStore]]:
    a, b = SharedLeaseStore(postgres_url), SharedLeaseStore(postgres_url)
    yield a, b
    a.close()
    b.close()


def lease(
    lease_id: str, node: str = "http://a", request_id: str | None = None, owner: str = ""
) -> LeaseRecord:
    return LeaseRecord(
        lease_id, request_id, node, f"c-{lease_id}", "img", None, "/testbed", time.time(), owner=owner
    )


def test_a_lease_written_by_one_replica_is_served_by_the_other(stores):
    a, b = stores
    a.put(lease("one", request_id="r1", owner="job-1")).result()
    (got,) = b.fetch(["one", "unknown"]).result()
    assert (got.lease_id, got.container_id, got.node, got.owner) == ("one", "c-one", "http://a", "job-1")
    found, exists = b.by_request("r1").result()
    assert exists and found is not None and found.lease_id == "one"
    assert b.by_request("r2").result() == (None, False)
    assert b.count() == 1 and [le.lease_id for le in b.load()] == ["one"]


def test_a_pending_allocation_holds_its_request_and_protects_its_container(stores):
    a, b = stores
    pending = LeaseRecord("p1", "req", "", "", "img", None, "", time.time())
    assert a.reserve(pending).result() is None
    # the other replica, given the same request id (a client retrying there), learns it is taken
    assert b.reserve(LeaseRecord("p2", "req", "", "", "img", None, "", time.time())).result() == "p1"
    assert b.by_request("req").result() == (None, True)  # under way: no lease to hand out yet
    assert b.fetch(["p1"]).result() == [] and b.load() == []  # nothing to route to yet
    containers, ids = b.node_leases("http://a").result()
    assert "p1" in ids  # reconciliation anywhere leaves the container being made alone
    done = lease("p1", request_id="req")
    a.put(done).result()
    containers, ids = b.node_leases("http://a").result()
    assert containers == {"c-p1"} and ids == {"p1"}
    assert b.by_request("req").result()[0].container_id == "c-p1"  # type: ignore[union-attr]


def test_expiry_hands_each_lease_to_exactly_one_replica(stores):
    a, b = stores
    ids = [f"l{i}" for i in range(300)]
    for lid in ids:
        a.put(lease(lid))
    a.flush()
    got: dict[str, list[str]] = {"a": [], "b": []}

    def expire(name: str, store: SharedLeaseStore) -> None:
        while True:  # small batches, both at once: they contend for the same rows
            batch = store.expire(-60.0, 3600.0, limit=7).result()  # idle "for -60 s": every lease is due
            if not batch:
                return
            got[name] += [le.lease_id for le in batch]

    threads = [threading.Thread(target=expire, args=(n, s)) for n, s in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(got["a"] + got["b"]) == sorted(ids)  # every one expired, none twice
    assert not set(got["a"]) & set(got["b"])
    assert a.count() == 0


def test_a_touched_lease_is_not_expired_and_an_idle_one_is(stores):
    a, b = stores
    a.put(lease("busy")).result()
    a.put(lease("idle")).result()
    b._writer.submit(lambda db: db.execute("UPDATE leases SET last_seen = last_seen - 100")).result()
    assert a.touch(["busy", "gone-already"]).result() == 1
    assert [le.lease_id for le in b.expire(50.0, 3600.0).result()] == ["idle"]
    assert [le.lease_id for le in b.load()] == ["busy"]


def test_removals_reach_the_other_replica_once_each(stores):
    a, b = stores
    for lid in ("x", "y", "z"):
        a.put(lease(lid)).result()
    b.events().result()  # whatever came before
    a.delete("x").result()
    a.delete("y", "lost", "container gone").result()
    a.delete("never-there").result()  # nothing removed: no event
    assert sorted(b.events().result()) == [("x", "gone", ""), ("y", "lost", "container gone")]
    assert b.events().result() == []  # read again within the straggler window: not handed out twice
    assert b.node_counts().result() == {"http://a": 1}


def test_the_sqlite_default_is_unchanged(tmp_path):
    cfg = PoolConfig(
        exec_urls=["http://127.0.0.1:1"], exec_token="t", pool_token="c", db_path=str(tmp_path / "l.db")
    ).finalize()
    assert cfg.database_url == "" and cfg.keep_leases_on_exit is False
    assert LeaseStore.shared is False
    shared = PoolConfig(
        exec_urls=["http://127.0.0.1:1"],
        exec_token="t",
        pool_token="c",
        database_url="postgresql://x/y",
        signing_key_file=str(tmp_path / "k.pem"),
    ).finalize()
    assert shared.keep_leases_on_exit is True  # a replica stopping releases nobody's leases


def test_replicas_without_one_shared_signing_key_are_refused(tmp_path):
    """Each replica checks the lease credentials the others issued: a key of its own (the default, beside
    its own database file) would make every call through another replica a 403."""
    with pytest.raises(SystemExit, match="SWE_POOL_SIGNING_KEY_FILE"):
        PoolConfig(
            exec_urls=["http://127.0.0.1:1"], exec_token="t", pool_token="c", database_url="postgresql://x/y"
        ).finalize()


def test_the_database_url_is_read_from_the_environment_or_a_file(tmp_path):
    secret = tmp_path / "db-url"
    secret.write_text("postgresql://pool@db/leases\n")
    assert (
        PoolConfig.from_env({"SWE_POOL_DATABASE_URL_FILE": str(secret)}).database_url
        == "postgresql://pool@db/leases"
    )
    assert "postgresql" not in repr(PoolConfig(database_url="postgresql://u:pw@h/d"))  # never in a log line


def test_the_pool_imports_psycopg_only_for_replicas():
    """One pool process with SQLite needs no `replicas` extra: nothing imports psycopg until a database
    URL is given."""
    code = (
        "import sys, swe_rl.fleet.pool.app, swe_rl.fleet.pool.pool, swe_rl.fleet.client;"
        " assert 'psycopg' not in sys.modules, 'imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_dropped_connection_is_made_again_and_an_unreachable_database_is_a_503(stores, postgres_url):
    a, b = stores
    a.put(lease("one")).result()
    pid = a._reader.submit(lambda db: db.execute("SELECT pg_backend_pid()").fetchone()[0]).result()  # type: ignore[index]
    b._writer.submit(lambda db: db.execute("SELECT pg_terminate_backend(%s)", (pid,))).result()
    assert [le.lease_id for le in a.load()] == ["one"]  # (on a new connection)
    with pytest.raises(ApiError) as refused:
        SharedLeaseStore(
            postgres_url.replace(postgres_url.split("@")[1].split("/")[0], f"127.0.0.1:{free_port()}")
        )
    assert refused.value.status == 503 and "lease database unavailable" in refused.value.message
