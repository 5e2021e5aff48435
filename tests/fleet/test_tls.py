"""TLS settings, without a server: what each side refuses before it serves or sends a token (fast tier).

The servers over TLS, with a CA of the test's own: tests/fleet/test_tls_fleet.py.
"""

from __future__ import annotations

import ssl

import httpx
import pytest

from swe_rl.fleet.client import EnvClient, EnvClientConfig
from swe_rl.fleet.client_config import pool_tls
from swe_rl.fleet.exec.app import parse_config
from swe_rl.fleet.pool.config import PoolConfig
from swe_rl.fleet.tls import client_context, server_files, tls_refusal
from tests.fleet.tls_certs import TestCA


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("other-ca"), name="stranger")


def test_a_certificate_and_its_key_load_and_go_together(ca, other_ca):
    mine, theirs = ca.issue("node"), other_ca.issue("node")
    assert server_files(str(mine.cert), str(mine.key), "X") == (str(mine.cert), str(mine.key))
    assert server_files("", "", "X") is None
    with pytest.raises(ValueError, match="go together .got only the certificate"):
        server_files(str(mine.cert), "", "X")
    with pytest.raises(ValueError, match="are not a PEM certificate and its key"):
        server_files(str(mine.cert), str(theirs.key), "X")  # another key
    with pytest.raises(ValueError, match="no such file"):
        server_files("/nonexistent/c.pem", str(mine.key), "X")
    with pytest.raises(ValueError, match="CA file /nonexistent/ca.pem: no such file"):
        client_context("/nonexistent/ca.pem")


def test_the_exec_server_refuses_half_a_key_pair_before_it_starts(ca, monkeypatch):
    issued = ca.issue("exec")
    monkeypatch.setenv("SWE_EXEC_TOKEN", "tok")
    with pytest.raises(SystemExit, match="a TLS certificate and its key go together"):
        parse_config(["--tls-cert", str(issued.cert)])
    monkeypatch.setenv("SWE_EXEC_TLS_KEY", str(issued.key))
    cfg = parse_config(["--tls-cert", str(issued.cert)])  # the key from its variable, the certificate by flag
    assert (cfg.tls_cert, cfg.tls_key) == (str(issued.cert), str(issued.key))


def _pool(**fields) -> PoolConfig:
    return PoolConfig(exec_token="t", pool_token="c", **fields)


def test_the_pool_with_tls_refuses_a_plain_http_node(ca):
    """With TLS on, a node reached by http:// would get the node token in clear text: refused at start."""
    issued = ca.issue("pool")
    urls = ["https://10.0.0.1:5000", "http://10.0.0.2:5000"]
    with pytest.raises(SystemExit, match=r"http://10.0.0.2:5000 not https:// .* clear text"):
        _pool(exec_urls=urls, exec_ca_file=str(ca.path)).finalize()
    with pytest.raises(SystemExit, match=r"http://10.0.0.2:5000 not https://"):
        _pool(exec_urls=urls, tls_cert=str(issued.cert), tls_key=str(issued.key)).finalize()
    with pytest.raises(SystemExit, match="go together"):
        _pool(exec_urls=urls[:1], tls_cert=str(issued.cert)).finalize()
    ok = _pool(
        exec_urls=urls[:1], exec_ca_file=str(ca.path), tls_cert=str(issued.cert), tls_key=str(issued.key)
    )
    assert ok.finalize().tls
    assert not _pool(exec_urls=urls).finalize().tls  # no TLS setting: as before (a private network)
    local = [
        "http://127.0.0.1:5000",
        "http://localhost:5001",
        "http://[::1]:5002",
    ]  # never leaves the machine
    assert _pool(exec_urls=local, exec_ca_file=str(ca.path)).finalize().tls


def test_the_pool_reads_its_tls_settings_from_the_environment(ca):
    issued = ca.issue("pool-env")
    env = {
        "SWE_POOL_TLS_CERT": str(issued.cert),
        "SWE_POOL_TLS_KEY": str(issued.key),
        "SWE_POOL_EXEC_CA_FILE": str(ca.path),
    }
    cfg = PoolConfig.from_env(env)
    assert (cfg.tls_cert, cfg.tls_key, cfg.exec_ca_file) == (str(issued.cert), str(issued.key), str(ca.path))


def test_the_client_checks_the_pool_against_its_ca_and_refuses_http_with_one(ca):
    context = pool_tls(EnvClientConfig(pool_url="https://127.0.0.1:1", ca_file=str(ca.path)))
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert pool_tls(EnvClientConfig(pool_url="http://127.0.0.1:1")) is True  # plain, as before
    with pytest.raises(ValueError, match="not https:// .SWE_CLIENT_CA_FILE is set.* clear text"):
        EnvClient(EnvClientConfig(pool_url="http://10.0.0.1:18090", ca_file=str(ca.path), token="t"))
    assert pool_tls(EnvClientConfig(pool_url="http://127.0.0.1:18090", ca_file=str(ca.path))) is True
    cfg = EnvClientConfig.from_env({"SWE_CLIENT_CA_FILE": str(ca.path), "SWE_POOL_URL": "https://h:1"})
    assert cfg.ca_file == str(ca.path)


def test_a_tls_failure_is_found_along_the_causes():
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    wrapped = httpx.ConnectError("boom")
    wrapped.__cause__ = cause
    assert tls_refusal(wrapped) is cause
    assert tls_refusal(httpx.ConnectError("refused")) is None
