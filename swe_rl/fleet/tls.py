"""TLS for the fleet: the servers' contexts (certificate + key), the clients' (a CA file), and the checks
that keep a token from crossing in clear text.

Both servers speak HTTPS when given a certificate and a key (`SWE_EXEC_TLS_CERT` / `SWE_EXEC_TLS_KEY`,
`SWE_POOL_TLS_CERT` / `SWE_POOL_TLS_KEY`, or `--tls-cert` / `--tls-key`). Every client verifies the
server it reaches, chain and name, against a CA file when one is set (`SWE_POOL_EXEC_CA_FILE` for the
pool's calls to the nodes, `SWE_CLIENT_CA_FILE` for clients of the pool), else against the system's CAs.
A side that has TLS settings refuses a plain `http://` peer outright (`require_https`), loopback
excepted: a mixed fleet would send a bearer token in clear text to the one node an operator forgot.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = [
    "TLS_MINIMUM",
    "client_context",
    "require_https",
    "server_context",
    "server_files",
    "tls_refusal",
]

TLS_MINIMUM = ssl.TLSVersion.TLSv1_2


def server_files(cert: str, key: str, what: str) -> tuple[str, str] | None:
    """(cert, key) with `~` expanded when both are given, None when neither; a clear ValueError when one is
    missing, unreadable, or the two do not make a key pair (`what` names the settings in the message)."""
    cert, key = os.path.expanduser(cert.strip()), os.path.expanduser(key.strip())
    if not cert and not key:
        return None
    if not cert or not key:
        raise ValueError(
            f"{what}: a TLS certificate and its key go together (got only the {'key' if key else 'certificate'})"
        )
    server_context(cert, key, what)  # loads them: a wrong file fails at start, not at the first caller
    return cert, key


def server_context(cert: str, key: str, what: str = "TLS") -> ssl.SSLContext:
    """A server context with this certificate chain and key (PEM), TLS 1.2 at least."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_MINIMUM
    try:
        ctx.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise ValueError(f"{what}: no such file: {exc.filename}") from None
    except PermissionError as exc:
        raise ValueError(f"{what}: cannot read {exc.filename}: permission denied") from None
    except ssl.SSLError as exc:
        raise ValueError(
            f"{what}: {cert} and {key} are not a PEM certificate and its key ({exc.reason or exc})"
        ) from None
    return ctx


def client_context(ca_file: str = "") -> ssl.SSLContext:
    """A client context that verifies the server's chain and name: against `ca_file` when given, else the
    system's CAs. A CA file that cannot be read is a ValueError naming it."""
    path = os.path.expanduser(ca_file.strip())
    try:
        ctx = ssl.create_default_context(cafile=path or None)
    except FileNotFoundError:
        raise ValueError(f"CA file {path}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"CA file {path}: not a PEM certificate file ({exc})") from None
    ctx.minimum_version = TLS_MINIMUM
    return ctx


def require_https(urls: Iterable[str], what: str, why: str) -> None:
    """ValueError naming every `http://` URL among `urls` but loopback ones: with TLS set, a plain peer
    gets no token (on loopback it never leaves the machine: a local pool of the eval script, say)."""
    plain = [u for u in urls if not u.lower().startswith("https://") and not _loopback(u)]
    if plain:
        raise ValueError(
            f"{what}: {', '.join(plain)} not https:// ({why}); a bearer token would cross in clear text"
        )


def _loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_refusal(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a failed connection (an untrusted or misnamed certificate, a plain-HTTP peer),
    found along its causes; None when it failed for another reason. Such a failure is a setting, not a
    passing fault: retrying it only hides it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = current if isinstance(current, ssl.SSLError) else None
        found = found or next((a for a in current.args if isinstance(a, ssl.SSLError)), None)
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None
