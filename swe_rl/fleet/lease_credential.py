"""Per-lease credentials: what the pool hands a client with each lease, and what a node checks.

A credential names one lease, the node and container it holds, the operations it allows and an expiry,
signed by the pool with an Ed25519 key. A node verifies it with the pool's public key alone: it never
asks the pool, so a direct call (client -> node) goes on while the pool restarts or is killed.

Why Ed25519 (a public-key signature) and not an HMAC key shared by the pool and the nodes: a node that
can check a credential cannot make one. With a shared HMAC key every node (a root shell in any one of
them) could mint credentials for every container of every other node; with a signature only the pool's
private key can, and the nodes hold nothing secret for it (the public key is handed to them by the pool
over its exec-token channel, `POST /lease-keys`). Verifying a signature costs ~0.1 ms of one core, half
of a direct exec's CPU in the exec server's app; so a verifier keeps the credentials it verified
(`VERIFIED_KEPT`, bounded) and checks a known one again by a dictionary look-up: the same bytes under
the same trusted key verify the same way every time. Expiry and scope are checked on every call all the
same (`LeaseGrant.allows`), and a credential kept is taken only while the key that signed it is trusted.

Wire form (docs/fleet.md, "Per-lease credentials"): ``v1.<payload>.<signature>``, both parts unpadded
base64url; the payload is compact JSON ``{"lease","node","container","ops","exp","kid"}`` (exp: epoch
seconds; kid: `key_id` of the signing key), the signature is over the bytes ``swe-lease-v1.<payload>``.
Clients treat it as opaque. The key id lets a node that trusts several pools' keys check a credential
with the one key that signed it (one signature check, not one per trusted key); a credential without
one (from a pool before key ids) is tried against every trusted key, of which a node keeps at most
`MAX_TRUSTED_KEYS`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from swe_rl.fleet.call_headers import CREDENTIAL_HEADER, LEASE_SCHEME

__all__ = [
    "CREDENTIAL_HEADER",
    "LEASE_SCHEME",
    "CredentialRefused",
    "LeaseGrant",
    "LeaseSigner",
    "LeaseVerifier",
]

VERSION = "v1"
_CONTEXT = b"swe-lease-v1."
MAX_CREDENTIAL_CHARS = 4096
"""A credential of ours is ~300–500 characters; a longer one is refused before its payload is decoded."""
VERIFIED_KEPT = 16384
"""Verified credentials a verifier keeps: ~1.4 KB each with their grant (23 MB when full). A node holds one
or two per lease it runs; the pool's, one per lease called through it (beyond the bound, the oldest are
checked again when next used)."""
MAX_TRUSTED_KEYS = 64
"""Pool keys a node's verifier trusts at once, the least recently given or used dropped first: every
pool start that makes a new key hands it over (a machine whose local fleets each make one had 2,038 of
them, each checked against every new credential without a key id, and listed in every /healthz)."""


class CredentialRefused(Exception):
    """The credential is missing, malformed, forged, expired, or not for this call (an HTTP 403)."""


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """What a valid credential allows: these `ops` on `container` of `lease` on `node` until `exp`."""

    lease: str
    node: str
    container: str
    ops: tuple[str, ...]
    exp: float

    def allows(self, op: str, *, lease: str | None = None, container: str | None = None) -> None:
        """Raise CredentialRefused unless op (on that lease and container, when given) is allowed now."""
        if time.time() >= self.exp:
            raise CredentialRefused(f"lease credential expired {time.time() - self.exp:.0f}s ago")
        if op not in self.ops:
            raise CredentialRefused(f"lease credential does not allow {op!r}")
        if lease is not None and lease != self.lease:
            raise CredentialRefused(f"lease credential is for lease {self.lease!r}, not {lease!r}")
        if container is not None and container != self.container:
            raise CredentialRefused("lease credential is for another container")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def public_key_text(key: Ed25519PublicKey) -> str:
    """A public key as the nodes receive it: its 32 raw bytes, base64url."""
    return _b64(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def key_id(text: str) -> str:
    """A public key's short name in the credentials it signs: 9 bytes of the SHA-256 of its raw bytes."""
    return _b64(hashlib.sha256(_unb64(text.strip())).digest()[:9])


def parse_public_key(text: str) -> Ed25519PublicKey:
    """The inverse of `public_key_text`; ValueError on anything else."""
    try:
        raw = _unb64(text.strip())
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not a base64url public key: {exc}") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key has 32 bytes, not {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def load_or_create_signing_key(path: str) -> Ed25519PrivateKey:
    """The pool's signing key from `path` (PEM, PKCS#8), made there (mode 600) on first use.

    Kept across restarts so credentials handed out before a restart stay good."""
    path = os.path.expanduser(path)
    try:
        with open(path, "rb") as fh:
            key = serialization.load_pem_private_key(fh.read(), password=None)
    except FileNotFoundError:
        key = Ed25519PrivateKey.generate()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        return key
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


class LeaseSigner:
    """The pool's half: issues credentials, and checks those a client sends the pool itself."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self.key = key
        self.public = public_key_text(key.public_key())
        self.kid = key_id(self.public)
        self.verifier = LeaseVerifier([self.public])

    def issue(
        self, lease: str, node: str, container: str, ops: Iterable[str], ttl: float
    ) -> tuple[str, float]:
        """A credential for these ops on the lease's container, good for ttl seconds; and its expiry."""
        exp = round(time.time() + ttl, 3)
        payload = {
            "lease": lease,
            "node": node,
            "container": container,
            "ops": sorted(ops),
            "exp": exp,
            "kid": self.kid,
        }
        body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        signature = _b64(self.key.sign(_CONTEXT + body.encode("ascii")))
        return f"{VERSION}.{body}.{signature}", exp


class LeaseVerifier:
    """The node's half: checks a credential against the public keys it trusts (several during a key change).

    At most `max_keys` are trusted, in order of use: a key given again (`add`) or that verified a
    credential becomes the newest, and the oldest is dropped when one more comes. Credentials it verified
    are kept (up to `kept`, the oldest dropped first) with the key that signed them: the same credential
    again costs a look-up, not a signature check, while that key is trusted."""

    def __init__(
        self, keys: Iterable[str] = (), *, kept: int = VERIFIED_KEPT, max_keys: int = MAX_TRUSTED_KEYS
    ) -> None:
        self._trusted: tuple[dict[str, Ed25519PublicKey], dict[str, str]] = ({}, {})
        """(text -> key, oldest first; key id -> text), replaced whole on every change: a reader takes one
        pair or the other, never the keys of one and the ids of the other."""
        self.kept = kept
        self.max_keys = max(1, max_keys)
        self._verified: dict[str, tuple[str, LeaseGrant]] = {}
        """credential -> (the trusted key's text that verified it, its grant); insertion order: oldest first."""
        self._lock = threading.Lock()
        for text in keys:
            self.add(text)

    @property
    def keys(self) -> dict[str, Ed25519PublicKey]:
        """The trusted keys, text -> key, oldest first (read-only: `add` and `remove` change them)."""
        return self._trusted[0]

    def add(self, text: str) -> bool:
        """Trust one more public key (base64url), as the newest; False when it was trusted already (it
        becomes the newest all the same). The oldest beyond `max_keys` are dropped. ValueError if bad."""
        text = text.strip()
        key = self.keys.get(text) or parse_public_key(text)
        with self._lock:
            fresh = text not in self.keys
            keys = {k: v for k, v in self.keys.items() if k != text}
            keys[text] = key
            dropped = list(keys)[: max(0, len(keys) - self.max_keys)]
            self._trust({k: v for k, v in keys.items() if k not in dropped}, dropped)
        return fresh

    def remove(self, text: str) -> bool:
        """Stop trusting a key; False when it was not trusted. What it signed fails from now on, the
        credentials kept as verified included (each is taken only while its key is in `keys`)."""
        text = text.strip()
        with self._lock:
            if text not in self.keys:
                return False
            self._trust({k: v for k, v in self.keys.items() if k != text}, [text])
        return True

    def _trust(self, keys: dict[str, Ed25519PublicKey], dropped: list[str]) -> None:
        """Under the lock: trust exactly `keys`; forget what the `dropped` ones verified."""
        self._trusted = (keys, {key_id(k): k for k in keys})
        if dropped:
            gone = set(dropped)
            self._verified = {c: kept for c, kept in self._verified.items() if kept[0] not in gone}

    def _used(self, text: str) -> None:
        """The key verified a credential just now: it becomes the newest (if still trusted)."""
        with self._lock:
            keys, ids = self._trusted
            if text in keys and next(reversed(keys)) != text:  # (the same keys: their ids stand)
                self._trusted = ({**{k: v for k, v in keys.items() if k != text}, text: keys[text]}, ids)

    def verify(self, credential: str) -> LeaseGrant:
        """The grant a credential carries; CredentialRefused when it is malformed or no trusted key signed it.
        Expiry and scope are the caller's check (`LeaseGrant.allows`), which knows the call."""
        keys, ids = self._trusted
        if not keys:
            raise CredentialRefused("this node trusts no pool key yet: direct calls are off")
        known = self._verified.get(credential)
        if known is not None and known[0] in keys:
            return known[1]
        parts = credential.strip().split(".")
        if len(credential) > MAX_CREDENTIAL_CHARS or len(parts) != 3 or parts[0] != VERSION:
            raise CredentialRefused("malformed lease credential")
        try:
            signature = _unb64(parts[2])
            data = json.loads(_unb64(parts[1]))  # read before the signature check: trusted only after it
        except (binascii.Error, ValueError, RecursionError):  # a forger controls what the parser sees
            raise CredentialRefused("malformed lease credential") from None
        if not isinstance(data, dict):
            raise CredentialRefused("malformed lease credential")
        kid = data.get("kid")
        if kid is None:  # a pool from before key ids: every trusted key is tried
            candidates = list(keys.items())
        else:
            text = ids.get(kid) if isinstance(kid, str) else None
            if text is None or text not in keys:
                raise CredentialRefused("lease credential signed by a key this node does not trust")
            candidates = [(text, keys[text])]
        signed = _CONTEXT + parts[1].encode("ascii", "replace")
        signer = ""
        for text, key in candidates:
            try:
                key.verify(signature, signed)
            except InvalidSignature:
                continue
            signer = text
            break
        if not signer:
            raise CredentialRefused("lease credential signature does not verify")
        try:
            grant = LeaseGrant(
                str(data["lease"]),
                str(data["node"]),
                str(data["container"]),
                tuple(str(op) for op in data["ops"]),
                float(data["exp"]),
            )
        except (ValueError, KeyError, TypeError):
            raise CredentialRefused("malformed lease credential") from None
        self._used(signer)
        self._keep(credential, signer, grant)
        return grant

    def _keep(self, credential: str, key: str, grant: LeaseGrant) -> None:
        if self.kept <= 0 or grant.exp <= time.time():  # an expired one is refused by every call anyway
            return
        with self._lock:
            if key not in self.keys:  # removed while this call verified with it
                return
            verified = self._verified
            while len(verified) >= self.kept:
                del verified[next(iter(verified))]
            verified[credential] = (key, grant)
