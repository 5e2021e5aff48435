"""The pool keys a node trusts for direct calls (swe_rl/fleet/exec/direct_calls.py): bounded, kept in order.

Every pool start that makes a new key hands it to its nodes. Unbounded, a machine whose local fleets
each made one trusted 2,038 keys: listed in every /healthz, rewritten to disk on every new one, and (for
credentials without a key id) each tried against every new credential.
"""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from swe_rl.fleet.exec.direct_calls import KEYS_FILE, DirectCalls
from swe_rl.fleet.lease_credential import MAX_TRUSTED_KEYS, LeaseSigner
from swe_rl.fleet.protocol import ApiError


def _keys(n: int) -> list[str]:
    return [LeaseSigner(Ed25519PrivateKey.generate()).public for _ in range(n)]


def test_a_node_trusts_the_newest_keys_only_and_keeps_them_in_order_across_a_restart(tmp_path):
    keys = _keys(MAX_TRUSTED_KEYS + 6)
    node = DirectCalls(registry=None, state_dir=str(tmp_path))  # type: ignore[arg-type]
    for key in keys:
        node.add_keys([key])
    newest = keys[-MAX_TRUSTED_KEYS:]
    assert sorted(node.keys) == sorted(newest)
    assert json.loads((tmp_path / KEYS_FILE).read_text()) == newest  # oldest first
    node.add_keys([newest[0]])  # given again: now the newest, the next oldest goes first
    again = DirectCalls(registry=None, state_dir=str(tmp_path))  # type: ignore[arg-type]
    assert sorted(again.keys) == sorted(newest)
    assert list(again.verifier.keys)[-1] == newest[0]
    assert [p.name for p in tmp_path.iterdir()] == [KEYS_FILE]  # no temporary file left


def test_a_key_file_of_the_old_unbounded_kind_is_read_down_to_the_bound(tmp_path):
    keys = _keys(MAX_TRUSTED_KEYS * 2)
    (tmp_path / KEYS_FILE).write_text(json.dumps(sorted(keys)))
    node = DirectCalls(registry=None, state_dir=str(tmp_path))  # type: ignore[arg-type]
    assert node.keys == sorted(sorted(keys)[-MAX_TRUSTED_KEYS:])


@pytest.mark.parametrize("bad", [[], "key", [1], ["not-a-key"]])
def test_bad_keys_are_a_400_and_change_nothing(tmp_path, bad):
    node = DirectCalls(registry=None, state_dir=str(tmp_path))  # type: ignore[arg-type]
    node.add_keys(_keys(1))
    before = (tmp_path / KEYS_FILE).read_text()
    with pytest.raises(ApiError) as err:
        node.add_keys(bad)
    assert err.value.status == 400
    assert (tmp_path / KEYS_FILE).read_text() == before
