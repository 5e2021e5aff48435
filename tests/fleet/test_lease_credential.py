"""Per-lease credentials (swe_rl/fleet/lease_credential.py): what a node accepts, and every forgery it must not.

The attacks: a changed payload (another container, another lease, a later expiry), a changed signature,
a credential signed by a key the node does not trust, an expired one, one for another operation, and
garbage. Each must be refused; only the pool's own signature over the exact payload passes.
"""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from swe_rl.fleet import lease_credential
from swe_rl.fleet.lease_credential import (
    _CONTEXT,
    CredentialRefused,
    LeaseSigner,
    LeaseVerifier,
    key_id,
    load_or_create_signing_key,
    parse_public_key,
)

OPS = ("exec", "diff", "read_file", "write_file", "evaluate", "close")


@pytest.fixture
def signer() -> LeaseSigner:
    return LeaseSigner(Ed25519PrivateKey.generate())


def _payload(credential: str) -> dict:
    part = credential.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def _with_payload(credential: str, payload: dict) -> str:
    version, _, signature = credential.split(".")
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    return f"{version}.{body}.{signature}"


def test_a_credential_carries_its_lease_node_container_ops_and_expiry(signer):
    credential, exp = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    grant = LeaseVerifier([signer.public]).verify(credential)
    assert (grant.lease, grant.node, grant.container, grant.exp) == (
        "lease-a",
        "http://n:5000",
        "c" * 64,
        exp,
    )
    assert set(grant.ops) == set(OPS)
    grant.allows("exec", lease="lease-a", container="c" * 64)  # no exception: allowed


@pytest.mark.parametrize(
    "change",
    [
        {"container": "d" * 64},  # lease A's credential pointed at lease B's container
        {"lease": "lease-b"},
        {"exp": 4102444800.0},  # a later expiry
        {"ops": ["exec", "destroy"]},
    ],
)
def test_a_changed_payload_is_refused(signer, change):
    credential, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    forged = _with_payload(credential, {**_payload(credential), **change})
    with pytest.raises(CredentialRefused, match="signature does not verify"):
        LeaseVerifier([signer.public]).verify(forged)


def test_a_changed_signature_and_garbage_are_refused(signer):
    credential, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    version, body, signature = credential.split(".")
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    verifier = LeaseVerifier([signer.public])
    with pytest.raises(CredentialRefused):
        verifier.verify(f"{version}.{body}.{flipped}")
    for garbage in ("", "v1", "v1.a.b", f"v2.{body}.{signature}", credential + ".x", "v1.%%%.%%%"):
        with pytest.raises(CredentialRefused):
            verifier.verify(garbage)


def test_a_forged_payload_nested_past_the_parsers_depth_or_oversized_is_refused_not_a_crash(
    signer, monkeypatch
):
    """The payload is parsed before the signature is checked, so a forger controls what the parser sees:
    JSON nested past the interpreter's recursion limit, or a huge payload, is refused like any forgery."""
    credential, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    version, _, signature = credential.split(".")
    verifier = LeaseVerifier([signer.public])
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"a": "' + b"x" * 1_000_000 + b'"}'):
        body = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        with pytest.raises(CredentialRefused, match="malformed"):
            verifier.verify(f"{version}.{body}.{signature}")
    # the nesting is refused by the parser's own limit too, not only by the length bound
    monkeypatch.setattr(lease_credential, "MAX_CREDENTIAL_CHARS", 10**7)
    body = base64.urlsafe_b64encode(b"[" * 100_000 + b"]" * 100_000).rstrip(b"=").decode()
    with pytest.raises(CredentialRefused, match="malformed"):
        verifier.verify(f"{version}.{body}.{signature}")


def test_a_credential_of_another_key_is_refused(signer):
    stranger = LeaseSigner(Ed25519PrivateKey.generate())
    credential, _ = stranger.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    with pytest.raises(CredentialRefused, match="a key this node does not trust"):
        LeaseVerifier([signer.public]).verify(credential)
    with pytest.raises(CredentialRefused, match="trusts no pool key"):
        LeaseVerifier().verify(credential)
    # a node told of both keys (a key change) takes both
    both = LeaseVerifier([signer.public, stranger.public])
    assert both.verify(credential).lease == "lease-a"


def test_expiry_operation_lease_and_container_are_checked(signer):
    expired, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, -1)
    with pytest.raises(CredentialRefused, match="expired"):
        LeaseVerifier([signer.public]).verify(expired).allows("exec")
    credential, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, ("read_file",), 600)
    grant = LeaseVerifier([signer.public]).verify(credential)
    with pytest.raises(CredentialRefused, match="does not allow 'exec'"):
        grant.allows("exec")
    with pytest.raises(CredentialRefused, match="for lease 'lease-a', not 'lease-b'"):
        grant.allows("read_file", lease="lease-b")
    with pytest.raises(CredentialRefused, match="another container"):
        grant.allows("read_file", container="d" * 64)


def test_the_signing_key_is_made_once_mode_600_and_kept(tmp_path):
    path = tmp_path / "keys" / "pool.key"
    first = load_or_create_signing_key(str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = load_or_create_signing_key(str(path))
    assert LeaseSigner(first).public == LeaseSigner(again).public  # credentials survive a pool restart


def test_a_bad_public_key_is_a_clear_error():
    for text in ("", "abc", base64.urlsafe_b64encode(b"x" * 31).decode()):
        with pytest.raises(ValueError):
            parse_public_key(text)


# Verified credentials are kept (a look-up instead of a signature check per call): what must still hold.


def test_a_kept_credential_is_still_checked_for_expiry_op_and_container(signer, monkeypatch):
    credential, exp = signer.issue("lease-a", "http://n:5000", "c" * 64, ("read_file",), 600)
    verifier = LeaseVerifier([signer.public])
    verifier.verify(credential).allows("read_file", container="c" * 64)
    grant = verifier.verify(credential)  # kept: no signature check this time
    assert credential in verifier._verified
    with pytest.raises(CredentialRefused, match="does not allow 'exec'"):
        grant.allows("exec")
    with pytest.raises(CredentialRefused, match="another container"):
        grant.allows("read_file", container="d" * 64)
    # the clock passes its expiry: the kept credential is refused like any other
    monkeypatch.setattr("swe_rl.fleet.lease_credential.time.time", lambda: exp + 1)
    with pytest.raises(CredentialRefused, match="expired"):
        verifier.verify(credential).allows("read_file")


def test_a_kept_credential_fails_once_its_key_is_no_longer_trusted(signer):
    other = LeaseSigner(Ed25519PrivateKey.generate())
    verifier = LeaseVerifier([signer.public, other.public])
    credential, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    kept_by_other, _ = other.issue("lease-b", "http://n:5000", "d" * 64, OPS, 600)
    assert verifier.verify(credential).lease == "lease-a"
    assert verifier.verify(kept_by_other).lease == "lease-b"
    assert verifier.remove(signer.public) and not verifier.remove(signer.public)
    with pytest.raises(CredentialRefused, match="a key this node does not trust"):
        verifier.verify(credential)
    assert verifier.verify(kept_by_other).lease == "lease-b"  # the other key's credentials stay good
    verifier.remove(other.public)
    with pytest.raises(CredentialRefused, match="trusts no pool key"):
        verifier.verify(kept_by_other)


def test_a_tampered_copy_of_a_kept_credential_is_refused(signer):
    verifier = LeaseVerifier([signer.public])
    credential, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    verifier.verify(credential)
    forged = _with_payload(credential, {**_payload(credential), "container": "d" * 64})
    with pytest.raises(CredentialRefused, match="signature does not verify"):
        verifier.verify(forged)
    assert forged not in verifier._verified


def test_the_kept_credentials_are_bounded_and_expired_ones_never_kept(signer):
    verifier = LeaseVerifier([signer.public], kept=2)
    issued = [signer.issue(f"lease-{i}", "http://n:5000", "c" * 64, OPS, 600)[0] for i in range(5)]
    for credential in issued:
        verifier.verify(credential)
    assert list(verifier._verified) == issued[-2:]  # the oldest dropped first
    assert [verifier.verify(c).lease for c in issued] == [f"lease-{i}" for i in range(5)]  # all still verify
    expired, _ = signer.issue("lease-x", "http://n:5000", "c" * 64, OPS, -1)
    verifier.verify(expired)
    assert expired not in verifier._verified


class _Counting:
    """A trusted key that counts its signature checks (the real check behind it)."""

    def __init__(self, key, calls: list[str], name: str) -> None:
        self.key, self.calls, self.name = key, calls, name

    def verify(self, signature: bytes, data: bytes) -> None:
        self.calls.append(self.name)
        self.key.verify(signature, data)


def _counted(verifier: LeaseVerifier) -> list[str]:
    calls: list[str] = []
    keys, ids = verifier._trusted
    verifier._trusted = ({t: _Counting(k, calls, t) for t, k in keys.items()}, ids)  # type: ignore[misc]
    return calls


def test_a_credential_names_its_key_so_one_signature_is_checked_whatever_the_number_of_keys(signer):
    """A node trusting many pools' keys checks a new credential with the one key its id names (it tried
    every key in turn: 2,038 on a machine whose local fleets each made one, ~0.2 s of CPU per lease)."""
    others = [LeaseSigner(Ed25519PrivateKey.generate()).public for _ in range(40)]
    verifier = LeaseVerifier([*others, signer.public])  # the signer's key is the newest: it was tried last
    calls = _counted(verifier)
    credential, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    assert _payload(credential)["kid"] == key_id(signer.public)
    assert verifier.verify(credential).lease == "lease-a"
    assert calls == [signer.public]
    stranger = LeaseSigner(Ed25519PrivateKey.generate())
    forged, _ = stranger.issue("lease-b", "http://n:5000", "d" * 64, OPS, 600)
    with pytest.raises(CredentialRefused, match="a key this node does not trust"):
        verifier.verify(forged)  # an unknown key id: refused with no signature check at all
    assert calls == [signer.public]


def test_a_key_id_of_another_trusted_key_or_none_at_all_does_not_help_a_forgery(signer):
    other = LeaseSigner(Ed25519PrivateKey.generate())
    verifier = LeaseVerifier([signer.public, other.public])
    credential, _ = signer.issue("lease-a", "http://n:5000", "c" * 64, OPS, 600)
    for payload in (
        {**_payload(credential), "kid": other.kid},  # names the other key: its check fails
        {k: v for k, v in _payload(credential).items() if k != "kid"},  # no id: every key tried, all fail
        {**_payload(credential), "kid": ["not", "a", "name"]},
    ):
        with pytest.raises(CredentialRefused):
            verifier.verify(_with_payload(credential, payload))


def test_a_credential_without_a_key_id_from_an_older_pool_still_verifies(signer):
    payload = {
        "lease": "lease-a",
        "node": "http://n:5000",
        "container": "c" * 64,
        "ops": list(OPS),
        "exp": 9e9,
    }
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    signature = base64.urlsafe_b64encode(signer.key.sign(_CONTEXT + body.encode())).rstrip(b"=").decode()
    others = [LeaseSigner(Ed25519PrivateKey.generate()).public for _ in range(3)]
    verifier = LeaseVerifier([*others, signer.public])
    assert verifier.verify(f"v1.{body}.{signature}").lease == "lease-a"


def test_the_trusted_keys_are_bounded_and_the_least_recently_given_or_used_goes_first():
    signers = [LeaseSigner(Ed25519PrivateKey.generate()) for _ in range(5)]
    verifier = LeaseVerifier([s.public for s in signers[:3]], max_keys=3)
    first, _ = signers[0].issue("lease-0", "http://n:5000", "c" * 64, OPS, 600)
    assert verifier.verify(first).lease == "lease-0"  # the oldest key was used: now the newest
    assert verifier.add(signers[3].public)  # one more: the least recent (signers[1]) goes
    assert list(verifier.keys) == [signers[2].public, signers[0].public, signers[3].public]
    dropped, _ = signers[1].issue("lease-1", "http://n:5000", "c" * 64, OPS, 600)
    with pytest.raises(CredentialRefused, match="does not trust"):
        verifier.verify(dropped)
    assert not verifier.add(signers[2].public)  # given again: trusted already, now the newest
    assert verifier.add(signers[4].public)
    assert list(verifier.keys) == [signers[3].public, signers[2].public, signers[4].public]
    with pytest.raises(CredentialRefused, match="does not trust"):
        verifier.verify(first)  # its key was dropped: the kept credential goes with it
    assert first not in verifier._verified
