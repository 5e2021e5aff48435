"""The lease record and the in-memory lease table (no HTTP, no Docker)."""

from __future__ import annotations

import time

import pytest

from swe_rl.fleet.pool.nodes import Node
from swe_rl.fleet.pool.store import LeaseRecord, LeaseStore, LeaseTable
from swe_rl.fleet.protocol import ApiError


def lease(lease_id: str, node: str = "http://a", request_id: str | None = None) -> LeaseRecord:
    return LeaseRecord(lease_id, request_id, node, f"c-{lease_id}", "img", None, "/testbed", time.time())


@pytest.fixture
def table(tmp_path) -> LeaseTable:
    nodes = {"http://a": Node("http://a"), "http://b": Node("http://b")}
    return LeaseTable(LeaseStore(str(tmp_path / "leases.db")), nodes)


def test_record_survives_a_restart(tmp_path):
    path = str(tmp_path / "sub" / "leases.db")
    store = LeaseStore(path)
    store.put(lease("one", request_id="r1"))
    store.put(lease("two"))
    store.delete("two")
    store.close()
    again = LeaseStore(path)
    (loaded,) = again.load()
    assert (loaded.lease_id, loaded.request_id, loaded.container_id, loaded.lost) == (
        "one",
        "r1",
        "c-one",
        None,
    )
    assert again.count() == 1
    again.clear()
    assert again.count() == 0


def test_table_indexes_and_node_counts(table):
    a, b = lease("1", request_id="r1"), lease("2", node="http://b")
    table.add(a)
    table.add(b)
    assert table.by_request == {"r1": "1"} and set(table.by_node["http://a"]) == {"1"}
    assert table.nodes["http://a"].active == 1 and table.nodes["http://b"].active == 1
    table.drop(a)
    assert "1" not in table.leases and table.by_request == {} and table.nodes["http://a"].active == 0
    table.drop(a)  # twice is harmless
    assert table.nodes["http://a"].active == 0


def test_lost_lease_is_a_tombstone(table):
    a = lease("1")
    table.add(a)
    table.store.put(a)
    assert table.mark_lost(a, "container gone") is True
    assert table.mark_lost(a, "again") is False
    assert table.nodes["http://a"].active == 0 and table.store.count() == 0
    with pytest.raises(ApiError) as exc:
        table.of({"lease_id": "1"})
    assert exc.value.status == 410 and exc.value.extra["lease_lost"] is True
    assert table.of({"lease_id": "1"}, allow_lost=True) is a
    table.drop(a)  # a lost lease no longer counts on its node
    assert table.nodes["http://a"].active == 0


def test_lookup_errors(table):
    with pytest.raises(ApiError) as exc:
        table.of({})
    assert exc.value.status == 400
    with pytest.raises(ApiError) as exc:
        table.of({"lease_id": "nope"})
    assert exc.value.status == 404 and exc.value.extra["lease_lost"] is True


def test_writes_run_on_the_stores_thread_in_order(tmp_path):
    """No write runs on the caller's thread (the pool's event loop); they land in the order asked."""
    import threading

    store = LeaseStore(str(tmp_path / "leases.db"))
    writes: list[tuple[str, int]] = []
    store.db.set_trace_callback(lambda sql: writes.append((sql.split()[0], threading.get_ident())))
    done = store.put(lease("one"))
    store.delete("one")
    store.put(lease("two"))
    done.result()
    store.flush()
    assert [verb for verb, _ in writes] == ["INSERT", "DELETE", "INSERT"]
    assert threading.get_ident() not in {thread for _, thread in writes}
    assert [x.lease_id for x in store.load()] == ["two"]
    store.close()
