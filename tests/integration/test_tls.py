"""HTTPS (nginx's ngx_http_ssl_module, OpenSSL 3): `listen ... ssl`, certificates chosen by SNI, protocols,
session resumption (tickets, ticket key files, a shared cache), RSA + ECDSA on one server, ALPN, the ssl
variables, plain HTTP on a TLS port, hostile and broken clients, and `proxy_pass https://`.

Every test starts its own server(s) with its own config (like test_engine_*.py), on 127.0.0.1 only, with a
private CA and leaf certificates made by tls_certs.py (openssl CLI) in pytest's temp dir, and checks with real
clients: curl (--cacert/--resolve, full verification), `openssl s_client` (sessions, sigalgs, renegotiation) and
python's ssl (SNI, getpeercert, sessions, raw records through a MemoryBIO).

Runs against nginx too (SUT=nginx): the same configs, the same answers, except
  * test_default_protocols_offer_tls13: nginx 1.22's default `ssl_protocols` is "TLSv1 TLSv1.1 TLSv1.2" (TLSv1.3
    joined the default in 1.23.4, which kosoku follows): asserted as nginx does it, then skipped for nginx;
  * test_config_error_*: kosoku's `-t` message format (FILE:LINE:COL: ...); nginx's own failure is checked, then
    the kosoku part is skipped for nginx.
The servers run with `worker_processes 2` (the session tests need a session made on one worker to resume on the
other; nginx's two processes are told apart with `ss -p`).
"""
from __future__ import annotations

import fcntl
import os
import random
import re
import socket
import ssl
import subprocess
import termios
import threading
import time
from pathlib import Path

import pytest

import sut
import tls_certs

WORKERS = 2
VARS = ("https=$https scheme=$scheme protocol=$ssl_protocol cipher=$ssl_cipher sni=$ssl_server_name "
        "reused=$ssl_session_reused port=$server_port alpn=$ssl_alpn_protocol")
PLAIN_HTTP_MSG = b"The plain HTTP request was sent to HTTPS port"


# ---------------------------------------------------------------------------------------------- the servers


class Pki:
    def __init__(self, d: Path):
        self.ca = tls_certs.CA(d)
        self.default = self.ca.leaf("default.test")
        self.a = self.ca.leaf("a.test")
        self.wild = self.ca.leaf("*.w.test", kind="ec")
        self.chained = self.ca.intermediate().leaf("c.test")          # leaf + intermediate in one file
        self.dual_rsa = self.ca.leaf("dual.test", kind="rsa", org="RSA", tag="dual-rsa")
        self.dual_ec = self.ca.leaf("dual.test", kind="ec", org="ECDSA", tag="dual-ec")
        self.other_ca = tls_certs.CA(d / "other", cn="some other CA")


def _locations(www: Path, name: str) -> str:
    return f"""
        root {www};
        location = /vars {{ return 200 "{VARS} server={name}\\n"; }}
        location = /post {{ return 200 "posted $request_method\\n"; }}
        location / {{
            add_header X-Server {name} always;
            add_header X-Https $https always;
            add_header X-Scheme $scheme always;
        }}"""


def _tls_server(port: int, names: str, leaf, www: Path, extra: str = "", listen_opts: str = "",
                protocols: str | None = "TLSv1.2 TLSv1.3") -> str:
    proto = f"ssl_protocols {protocols};" if protocols else ""
    certs = "".join(f"\n        ssl_certificate {l.chain};\n        ssl_certificate_key {l.key};"
                    for l in (leaf if isinstance(leaf, list) else [leaf] if leaf else []))
    return f"""
    server {{
        listen 127.0.0.1:{port} ssl{listen_opts};
        server_name {names};
        {proto}{certs}
        {extra}{_locations(www, names.split()[0])}
    }}"""


class Base:
    """What every server of the module shares: the PKI and the docroot (F-STATIC plus a random 1 MiB file)."""

    def __init__(self, d: Path):
        self.dir = d
        self.pki = Pki(d / "pki")
        self.www = sut.build_static_root(d)
        self.rand1m = random.Random(1).randbytes(1 << 20)
        (self.www / "rand1m.bin").write_bytes(self.rand1m)

    @property
    def ca(self) -> Path:
        return self.pki.ca.cert


class Tls:
    """One server process (2 workers) with a port per scenario. Three of them (core, sessions, proxy), so that a
    server missing one feature (e.g. `proxy_pass https://`) still runs the tests of the others."""

    def __init__(self, base: Base, kind: str, origin_port: int | None = None):
        self.base, self.pki, self.www, self.rand1m = base, base.pki, base.www, base.rand1m
        self.origin = None
        names = {"core": ["sni", "http", "v12", "defaults", "rej", "dual"],
                 "sessions": ["notix", "cache"], "proxy": ["proxy"]}[kind]
        self.port = dict(zip(names, sut.free_ports(len(names))))
        p, pki, www = self.port, self.pki, self.www
        ca = pki.ca.cert
        body = f"""
    access_log {base.dir}/access-{kind}.log;
    keepalive_timeout 30s;"""
        if kind == "core":
            body += f"""
    # SNI: a default server with its own certificate, an exact name, a wildcard, a chained certificate.
    server {{
        listen 127.0.0.1:{p['sni']} ssl default_server reuseport;
        listen 127.0.0.1:{p['http']} default_server;
        server_name default.test;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_certificate {pki.default.chain};
        ssl_certificate_key {pki.default.key};
        client_header_timeout 2s;
        {_locations(www, "default.test")}
    }}
    {_tls_server(p['sni'], "a.test", pki.a, www)}
    {_tls_server(p['sni'], "*.w.test", pki.wild, www)}
    {_tls_server(p['sni'], "c.test", pki.chained, www)}
    {_tls_server(p['v12'], "a.test", pki.a, www, protocols="TLSv1.2", listen_opts=" default_server")}
    {_tls_server(p['defaults'], "a.test", pki.a, www, protocols=None, listen_opts=" default_server")}
    server {{
        listen 127.0.0.1:{p['rej']} ssl default_server;
        ssl_reject_handshake on;
    }}
    {_tls_server(p['rej'], "a.test", pki.a, www)}
    {_tls_server(p['dual'], "dual.test", [pki.dual_rsa, pki.dual_ec], www, listen_opts=" default_server")}
"""
        elif kind == "sessions":
            body += f"""
    {_tls_server(p['notix'], "a.test", pki.a, www, listen_opts=" default_server reuseport",
                 extra="ssl_session_tickets off;")}
    {_tls_server(p['cache'], "a.test", pki.a, www, listen_opts=" default_server reuseport",
                 extra="ssl_session_tickets off; ssl_session_cache shared:itest_tls:1m;")}
"""
        else:
            body += f"""
    # proxy_ssl_session_reuse off: nginx keeps one upstream TLS session per implicit upstream (host:port), shared
    # by every location proxying there; resuming a session made by /verified/ skips /untrusted/'s verification.
    server {{
        listen 127.0.0.1:{p['proxy']};
        location /verified/ {{
            proxy_pass https://127.0.0.1:{origin_port};
            proxy_ssl_session_reuse off;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate {ca};
            proxy_ssl_name a.test;
            proxy_ssl_server_name on;
        }}
        location /wrong-name/ {{
            proxy_pass https://127.0.0.1:{origin_port};
            proxy_ssl_session_reuse off;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate {ca};
            proxy_ssl_name wrong.test;
            proxy_ssl_server_name on;
        }}
        location /untrusted/ {{
            proxy_pass https://127.0.0.1:{origin_port};
            proxy_ssl_session_reuse off;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate {pki.other_ca.cert};
            proxy_ssl_name a.test;
        }}
        location /unverified/ {{
            proxy_pass https://127.0.0.1:{origin_port};
            proxy_ssl_session_reuse off;
        }}
    }}
"""
        self.server = sut.ServerProcess(sut.SUT, base.dir / f"server-{kind}", body, list(p.values()),
                                        workers=WORKERS)

    @property
    def ca(self) -> Path:
        return self.pki.ca.cert


class HttpsOrigin(sut.ScriptedOrigin):
    """An HTTPS origin (python ssl, certificate a.test): answers `origin PATH sni=NAME` and closes; records the
    SNI each connection sent."""

    def __init__(self, leaf):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(leaf.chain), str(leaf.key))
        self.local = threading.local()
        self.ctx.sni_callback = self._sni
        self.requests: list[tuple[str, str | None]] = []
        super().__init__()

    def _sni(self, sslobj, name, ctx):
        self.local.sni = name

    def serve(self, c: socket.socket) -> None:
        self.local.sni = None
        c.settimeout(10)
        try:
            with self.ctx.wrap_socket(c, server_side=True) as s:
                head = sut.recv_request_head(s)
                if head is None:
                    return
                path = head.split(b" ", 2)[1].decode()
                self.requests.append((path, self.local.sni))
                body = f"origin {path} sni={self.local.sni}\n".encode()
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                          b"Connection: close\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Base:
    d = tmp_path_factory.mktemp("tls")
    os.chmod(d, 0o755)
    return Base(d)


def _run(t: Tls):
    t.server.start()
    yield t
    alive = t.server.alive()
    rc = t.server.stop()
    if t.origin:
        t.origin.close()
    assert alive, "server died during the module\n" + t.server.diagnostics()
    if sut.SUT == "kosoku":
        assert rc == 0, f"kosoku exited with {rc}\n" + t.server.diagnostics()


@pytest.fixture(scope="module")
def tls(base):
    """Static HTTPS, SNI, protocols, variables, ALPN, RSA+ECDSA, bad clients (ticket resumption too)."""
    yield from _run(Tls(base, "core"))


@pytest.fixture(scope="module")
def tls_sess(base):
    """ssl_session_tickets off, with and without ssl_session_cache shared."""
    yield from _run(Tls(base, "sessions"))


@pytest.fixture(scope="module")
def tls_proxy(base):
    """proxy_pass https:// to a python HTTPS origin."""
    origin = HttpsOrigin(base.pki.a)
    t = Tls(base, "proxy", origin.port)
    t.origin = origin
    yield from _run(t)


@pytest.fixture(autouse=True)
def _server_alive_after(request):
    yield
    for name in ("tls", "tls_sess", "tls_proxy"):
        if name in request.fixturenames:
            t = request.getfixturevalue(name)
            if not t.server.alive():
                pytest.fail(f"{t.server.kind} died during this test (exit {t.server.proc.returncode})\n"
                            + t.server.diagnostics(), pytrace=False)


# ---------------------------------------------------------------------------------------------- clients


def client_ctx(ca: Path, minv=None, maxv=None, alpn=None, ciphers=None, check_hostname=False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = check_hostname       # the CN is checked by the tests (unknown names get default.test)
    if minv:
        ctx.minimum_version = minv
    if maxv:
        ctx.maximum_version = maxv
    if alpn:
        ctx.set_alpn_protocols(alpn)
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


class TLSConn(sut.Conn):
    """sut.Conn over TLS (python ssl): the same send / read_responses / transcript, decrypted bytes."""

    def __init__(self, port: int, server_name: str | None = "a.test", ctx: ssl.SSLContext | None = None,
                 ca: Path | None = None, session=None, timeout: float = 5.0):
        super().__init__(port, timeout=timeout)
        self.ctx = ctx or client_ctx(ca)
        self.sock = self.ctx.wrap_socket(self.sock, server_hostname=server_name, session=session)

    def _recv_some(self, deadline: float) -> bool:
        try:
            return super()._recv_some(deadline)
        except ssl.SSLError as e:
            self.closed = True
            sut.record(f"conn#{self.id} <<< TLS error", repr(e).encode())
            return False

    def close(self) -> None:
        # What the tests look at after the connection is gone.
        if not hasattr(self, "info") and getattr(self.sock, "_sslobj", None) is not None:
            self.info = {"cert": self.sock.getpeercert(), "version": self.sock.version(),
                         "cipher": self.sock.cipher()[0], "alpn": self.sock.selected_alpn_protocol(),
                         "reused": self.sock.session_reused, "session": self.sock.session}
        super().close()

    def _info(self, k):
        if hasattr(self, "info"):
            return self.info[k]
        return {"cert": self.sock.getpeercert, "version": self.sock.version, "cipher": lambda: self.sock.cipher()[0],
                "alpn": self.sock.selected_alpn_protocol, "reused": lambda: self.sock.session_reused,
                "session": lambda: self.sock.session}[k]()

    def version(self) -> str:
        return self._info("version")

    def cipher(self) -> str:
        return self._info("cipher")

    def alpn(self) -> str | None:
        return self._info("alpn")

    def reused(self) -> bool:
        return self._info("reused")

    def session(self):
        return self._info("session")

    def cn(self) -> str:
        return dict(x[0] for x in self._info("cert")["subject"])["commonName"]

    def org(self) -> str | None:
        return dict(x[0] for x in self._info("cert")["subject"]).get("organizationName")


def get(host: str, path: str, close: bool = False, headers=()) -> bytes:
    return sut.build_request("GET", path, host, headers=headers, close=close)


def tls_get(t: Tls, port: int, path: str, sni: str | None = "a.test", host: str | None = None,
            **ctx_kw) -> tuple[sut.Response, TLSConn]:
    c = TLSConn(port, sni, client_ctx(t.ca, **ctx_kw))
    with c:
        c.send(get(host or sni or "default.test", path, close=True))
        r = c.read_response(timeout=10)
        assert r is not None, "no response"
        return r, c


def vars_of(r: sut.Response) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in r.body.decode().split())


def curl(t: Tls, port: int, name: str, path: str, *extra: str, out: Path | None = None) -> subprocess.CompletedProcess:
    cmd = ["curl", "-sS", "--max-time", "20", "--cacert", str(t.ca), "--resolve", f"{name}:{port}:127.0.0.1",
           "-w", "%{http_code} %{ssl_verify_result} %{http_version}", *extra]
    if out:
        cmd += ["-o", str(out)]
    cmd.append(f"https://{name}:{port}{path}")
    return subprocess.run(cmd, capture_output=True, timeout=30)


def s_client(t: Tls, port: int, *args: str, servername: str | None = "a.test", request: bool = True,
             timeout: float = 15) -> tuple[int, str]:
    """openssl s_client; with `request`, sends a GET with Connection: close and reads until the server closes
    (so TLS 1.3 tickets, sent after the handshake, are received before -sess_out is written)."""
    cmd = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", str(t.ca)]
    if servername:
        cmd += ["-servername", servername]
    else:
        cmd += ["-noservername"]
    cmd += list(args)
    data = b""
    if request:
        cmd.append("-ign_eof")
        data = get(servername or "default.test", "/vars", close=True)
    p = subprocess.run(cmd, input=data, capture_output=True, timeout=timeout)
    out = p.stdout.decode(errors="replace") + "\n--- stderr\n" + p.stderr.decode(errors="replace")
    sut.record(f"s_client {' '.join(args)} rc={p.returncode}", out[-3000:].encode())
    return p.returncode, out


def s_session(out: str) -> str:
    """'New' or 'Reused' from s_client's output line 'New, TLSv1.3, Cipher is ...'."""
    m = re.search(r"^(New|Reused), (TLSv[\d.]+|SSLv3)", out, re.M)
    assert m, "no New/Reused line in s_client output:\n" + out[-2000:]
    return m.group(1)


def client_hello(ca: Path, server_name: str = "a.test", **ctx_kw) -> bytes:
    """The bytes of a real ClientHello (python ssl through a MemoryBIO)."""
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_ctx(ca, **ctx_kw).wrap_bio(inc, out, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


class MemTLS:
    """A TLS client over a raw socket through MemoryBIOs: the test decides how the bytes go out (trickled) and can
    write raw records after the handshake."""

    def __init__(self, port: int, ca: Path, server_name: str = "a.test", **ctx_kw):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = client_ctx(ca, **ctx_kw).wrap_bio(self.inc, self.out, server_hostname=server_name)

    def flush(self, trickle: float | None = None) -> None:
        data = self.out.read()
        if trickle is None:
            self.sock.sendall(data)
            return
        for i in range(len(data)):
            self.sock.sendall(data[i:i + 1])
            time.sleep(trickle)

    def handshake(self, trickle_first: float | None = None, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        first = True
        while True:
            try:
                self.obj.do_handshake()
                self.flush()
                return
            except ssl.SSLWantReadError:
                self.flush(trickle_first if first else None)
                first = False
                assert time.monotonic() < deadline, "handshake did not complete"
                d = self.sock.recv(65536)
                assert d, "server closed during the handshake"
                self.inc.write(d)

    def request(self, data: bytes, timeout: float = 10) -> sut.Response:
        self.obj.write(data)
        self.flush()
        buf = b""
        deadline = time.monotonic() + timeout
        while True:
            try:
                buf += self.obj.read(1 << 20)
                r = sut.parse_response(buf, "GET")
                if r:
                    return r[0]
                continue
            except ssl.SSLWantReadError:
                pass
            assert time.monotonic() < deadline, "no response"
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            d = self.sock.recv(65536)
            assert d, "server closed before answering"
            self.inc.write(d)

    def close(self) -> None:
        self.sock.close()


def wait_closed(sock: socket.socket, timeout: float) -> tuple[str, float, bytes]:
    """Reads a raw socket until EOF/RST or timeout: ('EOF'|'RST'|'open', seconds, bytes received)."""
    t0 = time.monotonic()
    got = b""
    deadline = t0 + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "open", time.monotonic() - t0, got
        sock.settimeout(left)
        try:
            d = sock.recv(65536)
        except socket.timeout:
            return "open", time.monotonic() - t0, got
        except ConnectionResetError:
            return "RST", time.monotonic() - t0, got
        if not d:
            return "EOF", time.monotonic() - t0, got
        got += d


def server_pid_of(local_port: int, server_port: int) -> int | None:
    """The pid owning the server side of the connection from local_port (`ss -tnp`)."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( sport = :{server_port} and dport = :{local_port} )"],
                         capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None


def assert_serving(t: Tls, old: TLSConn | None = None) -> None:
    """The server still answers: on a connection opened before the bad client (if given) and on a new one."""
    if old is not None:
        old.send(get("a.test", "/abc.txt"))
        r = old.read_response(timeout=5)
        assert r is not None and (r.status, r.body) == (200, b"abcdefghijklmnopqrstuvwxyz"), \
            f"the connection opened before the bad client no longer works: {r}"
    r, _ = tls_get(t, t.port["sni"], "/abc.txt")
    assert (r.status, r.body) == (200, b"abcdefghijklmnopqrstuvwxyz"), r
    assert t.server.alive()


@pytest.fixture
def bystander(tls):
    """A keep-alive TLS connection opened (and used once) before the test's bad client."""
    c = TLSConn(tls.port["sni"], "a.test", client_ctx(tls.ca))
    c.send(get("a.test", "/abc.txt"))
    assert c.read_response().status == 200
    yield c
    c.close()


# ---------------------------------------------------------------------------------------------- basic HTTPS


def test_curl_gets_a_static_file_byte_exact(tls, tmp_path):
    out = tmp_path / "abc"
    p = curl(tls, tls.port["sni"], "a.test", "/abc.txt", out=out)
    assert p.returncode == 0, p.stderr
    code, verify, _ = p.stdout.decode().split()
    assert (code, verify) == ("200", "0")  # 0: the chain verified against the CA, name included
    assert out.read_bytes() == b"abcdefghijklmnopqrstuvwxyz"


def test_curl_gets_1mib_byte_exact(tls, tmp_path):
    out = tmp_path / "big"
    p = curl(tls, tls.port["sni"], "a.test", "/rand1m.bin", out=out)
    assert p.returncode == 0 and p.stdout.decode().startswith("200 0"), p
    assert out.read_bytes() == tls.rand1m


def test_the_chain_file_sends_the_intermediate(tls, tmp_path):
    # c.test's certificate is issued by an intermediate; the client trusts only the root.
    p = curl(tls, tls.port["sni"], "c.test", "/abc.txt", "-D", "-")
    assert p.returncode == 0 and b"x-server: c.test" in p.stdout.lower(), p


def test_keepalive_sequential_and_pipelined_on_one_connection(tls):
    with TLSConn(tls.port["sni"], "a.test", client_ctx(tls.ca)) as c:
        for i in range(5):
            c.send(get("a.test", "/abc.txt" if i % 2 == 0 else "/file100.bin"))
            r = c.read_response()
            assert r.status == 200 and r.body == (b"abcdefghijklmnopqrstuvwxyz" if i % 2 == 0 else bytes(range(100)))
            assert r.header("X-Server") == "a.test" and r.header("X-Https") == "on"
        c.send(b"".join(get("a.test", p) for p in ["/abc.txt", "/vars", "/rand1m.bin", "/file100.bin", "/vars"]))
        rs = c.read_responses(5, timeout=10)
        assert [r.status for r in rs] == [200] * 5
        assert rs[0].body == b"abcdefghijklmnopqrstuvwxyz"
        assert rs[2].body == tls.rand1m
        assert rs[3].body == bytes(range(100))
        assert vars_of(rs[1])["server"] == "a.test" and rs[1].body == rs[4].body
        c.send(get("a.test", "/abc.txt", close=True))
        assert c.read_response().status == 200
        assert c.wait_closed(5), "Connection: close not honoured over TLS"


def test_post_with_a_body_then_keepalive(tls):
    body = random.Random(2).randbytes(100_000)
    with TLSConn(tls.port["sni"], "a.test", client_ctx(tls.ca)) as c:
        c.send(sut.build_request("POST", "/post", "a.test", body=body, close=False))
        r = c.read_response(timeout=10)
        assert (r.status, r.body) == (200, b"posted POST\n"), r
        c.send(get("a.test", "/abc.txt"))  # the body was read (discarded), not taken for the next request
        r = c.read_response()
        assert (r.status, r.body) == (200, b"abcdefghijklmnopqrstuvwxyz"), r


def test_plain_http_to_the_tls_port_is_400(tls):
    ex = sut.exchange(tls.port["sni"], get("a.test", "/abc.txt"), ["GET"], timeout=5)
    r = ex.one()
    assert r.status == 400
    assert PLAIN_HTTP_MSG in r.body, r.body
    assert b"<title>400 The plain HTTP request was sent to HTTPS port</title>" in r.body
    assert ex.closed


# ---------------------------------------------------------------------------------------------- SNI


@pytest.mark.parametrize("sni, cn, server", [
    ("a.test", "a.test", "a.test"),
    ("A.Test", "a.test", "a.test"),            # names are case-insensitive
    ("x.w.test", "*.w.test", "*.w.test"),      # wildcard
    ("deep.x.w.test", "*.w.test", "*.w.test"),  # nginx's *.w.test matches more than one label
    ("c.test", "c.test", "c.test"),
    ("unknown.test", "default.test", "default.test"),
    ("w.test", "default.test", "default.test"),  # *.w.test does not match w.test itself
    (None, "default.test", "default.test"),     # no SNI at all
])
def test_sni_selects_the_certificate(tls, sni, cn, server):
    r, c = tls_get(tls, tls.port["sni"], "/vars", sni=sni)
    assert c.cn() == cn
    v = vars_of(r)
    assert v["server"] == server, r.body
    assert v["sni"] == (sni or ""), r.body          # $ssl_server_name is the name as sent


def test_sni_with_openssl_s_client(tls):
    rc, out = s_client(tls, tls.port["sni"], servername="x.w.test")
    assert rc == 0 and re.search(r"^subject=CN = \*\.w\.test$", out, re.M), out[-2000:]
    assert "Verify return code: 0 (ok)" in out


def test_reject_handshake_for_unknown_names(tls):
    port = tls.port["rej"]
    for name in ["unknown.test", None]:
        with pytest.raises(ssl.SSLError) as e:
            tls_get(tls, port, "/vars", sni=name)
        assert e.value.reason == "TLSV1_UNRECOGNIZED_NAME", e.value
    rc, out = s_client(tls, port, servername="nope.test", request=False)
    assert rc != 0 and "tlsv1 unrecognized name" in out and "SSL alert number 112" in out, out[-2000:]
    r, c = tls_get(tls, port, "/vars", sni="a.test")
    assert r.status == 200 and c.cn() == "a.test"


# ---------------------------------------------------------------------------------------------- protocols, variables


def test_tls12_only_server(tls):
    port = tls.port["v12"]
    with pytest.raises(ssl.SSLError) as e:
        tls_get(tls, port, "/vars", minv=ssl.TLSVersion.TLSv1_3)
    assert e.value.reason == "TLSV1_ALERT_PROTOCOL_VERSION", e.value
    r, c = tls_get(tls, port, "/vars")
    assert vars_of(r)["protocol"] == "TLSv1.2" and c.version() == "TLSv1.2"
    rc, out = s_client(tls, port, "-tls1_3", request=False)
    assert rc != 0 and "alert protocol version" in out, out[-2000:]


def test_tls13_is_negotiated_when_offered(tls):
    r, c = tls_get(tls, tls.port["sni"], "/vars")
    assert vars_of(r)["protocol"] == "TLSv1.3" == c.version()
    r, c = tls_get(tls, tls.port["sni"], "/vars", maxv=ssl.TLSVersion.TLSv1_2)
    assert vars_of(r)["protocol"] == "TLSv1.2" == c.version()


def test_default_protocols_offer_tls13(tls):
    """No ssl_protocols: nginx 1.23.4+ (and kosoku) "TLSv1.2 TLSv1.3"; nginx 1.22 "TLSv1 TLSv1.1 TLSv1.2"."""
    port = tls.port["defaults"]
    r, c = tls_get(tls, port, "/vars", maxv=ssl.TLSVersion.TLSv1_2)
    assert vars_of(r)["protocol"] == "TLSv1.2"
    r, c = tls_get(tls, port, "/vars")
    got = vars_of(r)["protocol"]
    if sut.SUT == "nginx":
        ver = subprocess.run([sut.NGINX_BIN, "-v"], capture_output=True, text=True).stderr
        m = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", ver)
        if m and tuple(map(int, m.groups())) < (1, 23, 4):
            assert got == "TLSv1.2"
            sut.nginx_deviation("nginx < 1.23.4 leaves TLSv1.3 out of the default ssl_protocols")
    assert got == "TLSv1.3"


@pytest.mark.parametrize("maxv", [None, ssl.TLSVersion.TLSv1_2], ids=["tls13", "tls12"])
def test_ssl_variables(tls, maxv):
    port = tls.port["sni"]
    r, c = tls_get(tls, port, "/vars", maxv=maxv, alpn=["http/1.1"])
    v = vars_of(r)
    assert v == {"https": "on", "scheme": "https", "protocol": c.version(), "cipher": c.cipher(),
                 "sni": "a.test", "reused": ".", "port": str(port), "alpn": "http/1.1", "server": "a.test"}, r.body
    r, _ = tls_get(tls, port, "/abc.txt")
    assert (r.header("X-Https"), r.header("X-Scheme")) == ("on", "https")


def test_ssl_variables_on_plain_http(tls):
    port = tls.port["http"]
    r = sut.request(port, "GET", "/vars", host="default.test")
    assert r.body == (f"https= scheme=http protocol= cipher= sni= reused= port={port} alpn= "
                      f"server=default.test\n").encode(), r.body
    r = sut.request(port, "GET", "/abc.txt", host="default.test")
    assert r.header("X-Https") is None and r.header("X-Scheme") == "http"  # an empty add_header is not sent


def test_alpn(tls):
    for offer in (["http/1.1"], ["h2", "http/1.1"]):
        r, c = tls_get(tls, tls.port["sni"], "/vars", alpn=offer)
        assert c.alpn() == "http/1.1" and vars_of(r)["alpn"] == "http/1.1"
    r, c = tls_get(tls, tls.port["sni"], "/vars")           # no ALPN offered
    assert c.alpn() is None and vars_of(r)["alpn"] == ""
    # Offering only protocols the server does not speak: nginx (1.21.4+) refuses the handshake.
    with pytest.raises(ssl.SSLError) as e:
        tls_get(tls, tls.port["sni"], "/vars", alpn=["h2"])
    assert "no application protocol" in str(e.value), e.value
    p = curl(tls, tls.port["sni"], "a.test", "/abc.txt", "-v")
    assert b"ALPN: server accepted http/1.1" in p.stderr, p.stderr[-2000:]


# ---------------------------------------------------------------------------------------------- RSA + ECDSA


@pytest.mark.parametrize("args, org, bits", [
    (["-sigalgs", "ECDSA+SHA256"], "ECDSA", 256),
    (["-sigalgs", "RSA-PSS+SHA256:RSA+SHA256"], "RSA", 2048),
    (["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"], "ECDSA", 256),
    (["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"], "RSA", 2048),
], ids=["tls13-ecdsa", "tls13-rsa", "tls12-ecdsa", "tls12-rsa"])
def test_rsa_and_ecdsa_certificates(tls, args, org, bits):
    rc, out = s_client(tls, tls.port["dual"], *args, servername="dual.test")
    assert rc == 0, out[-2000:]
    assert re.search(rf"^subject=CN = dual\.test, O = {org}$", out, re.M), out[-3000:]
    assert f"Server public key is {bits} bit" in out
    assert "Verify return code: 0 (ok)" in out
    assert "server=dual.test" in out  # the request was answered


def test_rsa_and_ecdsa_with_python_tls12(tls):
    for ciphers, org in (("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDSA"), ("ECDHE-RSA-AES128-GCM-SHA256", "RSA")):
        r, c = tls_get(tls, tls.port["dual"], "/vars", sni="dual.test", maxv=ssl.TLSVersion.TLSv1_2, ciphers=ciphers)
        assert c.org() == org and vars_of(r)["cipher"] == ciphers, (c.org(), r.body)


# ---------------------------------------------------------------------------------------------- sessions


@pytest.mark.parametrize("proto", ["-tls1_3", "-tls1_2"])
def test_session_resumption_with_tickets(tls, tmp_path, proto):
    sess = tmp_path / "sess.pem"
    rc, out = s_client(tls, tls.port["sni"], proto, "-sess_out", str(sess))
    assert rc == 0 and s_session(out) == "New" and "reused=." in out, out[-2000:]
    assert sess.exists() and sess.stat().st_size > 0
    for i in range(6):  # reuseport spreads the connections over both workers
        rc, out = s_client(tls, tls.port["sni"], proto, "-sess_in", str(sess))
        assert rc == 0 and s_session(out) == "Reused", f"try {i}: " + out[-2000:]
        assert "reused=r" in out, out[-2000:]


@pytest.mark.parametrize("maxv", [None, ssl.TLSVersion.TLSv1_2], ids=["tls13", "tls12"])
@pytest.mark.parametrize("port_name", ["sni", "cache"], ids=["tickets", "shared-cache"])
def test_sessions_resume_on_every_worker(request, maxv, port_name):
    """A session made on one connection resumes on the others, whichever worker takes them: `listen ...
    reuseport` spreads connections by source port; `ss -p` shows which process (nginx) holds each one."""
    tls = request.getfixturevalue("tls" if port_name == "sni" else "tls_sess")
    port = tls.port[port_name]
    ctx = client_ctx(tls.ca, maxv=maxv)
    with TLSConn(port, "a.test", ctx) as c:
        c.send(get("a.test", "/vars", close=True))
        assert vars_of(c.read_response())["reused"] == "."
        c.wait_closed(5)
        session = c.session()
    assert session is not None
    pids = set()
    for i in range(16):
        with TLSConn(port, "a.test", ctx, session=session) as c:
            pid = server_pid_of(c.sock.getsockname()[1], port)
            c.send(get("a.test", "/vars", close=True))
            r = c.read_response()
            assert c.reused() and vars_of(r)["reused"] == "r", f"try {i} (pid {pid}): {r.body}"
            pids.add(pid)
        if len(pids) >= 2 and i >= 5:
            break
    if sut.SUT == "nginx":  # kosoku's workers are threads of one process: ss shows one pid
        assert len(pids) >= 2, f"all connections went to one worker {pids}; cannot tell the test is valid"


@pytest.mark.parametrize("proto", ["-tls1_3", "-tls1_2"])
def test_no_resumption_with_tickets_off_and_no_cache(tls_sess, tmp_path, proto):
    tls = tls_sess
    sess = tmp_path / "sess.pem"
    port = tls.port["notix"]
    rc, out = s_client(tls, port, proto, "-sess_out", str(sess))
    assert rc == 0 and s_session(out) == "New", out[-2000:]
    if proto == "-tls1_2":
        assert "TLS session ticket:" not in out  # no ticket was issued
    if not sess.exists():
        return  # nothing to resume with: that is the point
    for _ in range(3):
        rc, out = s_client(tls, port, proto, "-sess_in", str(sess))
        assert rc == 0 and s_session(out) == "New" and "reused=." in out, out[-2000:]


@pytest.mark.parametrize("proto", ["-tls1_3", "-tls1_2"])
def test_shared_session_cache_without_tickets(tls_sess, tmp_path, proto):
    tls = tls_sess
    sess = tmp_path / "sess.pem"
    port = tls.port["cache"]
    rc, out = s_client(tls, port, proto, "-sess_out", str(sess))
    assert rc == 0 and s_session(out) == "New", out[-2000:]
    if proto == "-tls1_2":
        assert "TLS session ticket:" not in out and re.search(r"Session-ID: [0-9A-F]{64}", out), out[-2000:]
    for _ in range(4):
        rc, out = s_client(tls, port, proto, "-sess_in", str(sess))
        assert rc == 0 and s_session(out) == "Reused" and "reused=r" in out, out[-2000:]


def _ticket_server(tmp: Path, pki: Pki, www: Path, key: Path | None, name: str) -> sut.ServerProcess:
    port = sut.free_port()
    extra = f"ssl_session_ticket_key {key};" if key else ""
    body = _tls_server(port, "a.test", pki.a, www, extra=extra, listen_opts=" default_server")
    s = sut.ServerProcess(sut.SUT, tmp / name, body, [port], workers=WORKERS)
    s.port = port
    return s


@pytest.mark.parametrize("proto", ["-tls1_3", "-tls1_2"])
def test_ticket_key_file_survives_a_restart(base, tmp_path, proto):
    tls = base
    key = tls_certs.ticket_key(tmp_path / "ticket.key", 80)
    assert key.stat().st_size == 80
    sess = tmp_path / "sess.pem"
    s = _ticket_server(tmp_path, tls.pki, tls.www, key, "with-key")
    s.start()
    try:
        rc, out = s_client(tls, s.port, proto, "-sess_out", str(sess))
        assert rc == 0 and s_session(out) == "New", out[-2000:]
    finally:
        s.stop()
    s.start()  # a new process: only the key file is shared with the first
    try:
        for _ in range(3):
            rc, out = s_client(tls, s.port, proto, "-sess_in", str(sess))
            assert rc == 0 and s_session(out) == "Reused" and "reused=r" in out, out[-2000:]
    finally:
        assert s.stop() == 0 or sut.SUT == "nginx"


def test_without_a_ticket_key_file_a_restart_forgets_sessions(base, tmp_path):
    tls = base
    sess = tmp_path / "sess.pem"
    s = _ticket_server(tmp_path, tls.pki, tls.www, None, "no-key")
    s.start()
    try:
        rc, out = s_client(tls, s.port, "-tls1_3", "-sess_out", str(sess))
        assert rc == 0 and s_session(out) == "New"
        rc, out = s_client(tls, s.port, "-tls1_3", "-sess_in", str(sess))
        assert rc == 0 and s_session(out) == "Reused", out[-2000:]  # same process: resumed
    finally:
        s.stop()
    s.start()
    try:
        rc, out = s_client(tls, s.port, "-tls1_3", "-sess_in", str(sess))
        assert rc == 0 and s_session(out) == "New", out[-2000:]
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------- bad clients


@pytest.mark.parametrize("data, alert", [
    (b"\x16" + b"garbage!" * 40, None),                      # not a TLS record version: closed, no alert
    (b"\x16\x03\x01\xff\xff" + b"\0" * 200, b"\x02\x16"),     # record longer than TLS allows: record_overflow
    (b"\x80\x80" + b"garbage!" * 20, None),                  # SSLv2-looking first byte, then garbage
], ids=["garbage-after-0x16", "oversized-record", "sslv2-garbage"])
def test_garbage_closes_only_that_connection(tls, bystander, data, alert):
    with socket.create_connection(("127.0.0.1", tls.port["sni"]), timeout=5) as s:
        s.sendall(data)
        how, secs, got = wait_closed(s, 5)
    assert how in ("EOF", "RST") and secs < 1.5, (how, secs, got)  # at once, not at client_header_timeout
    if alert:
        assert got[:1] == b"\x15" and got[-2:] == alert, got.hex()  # a fatal alert record, then the close
    else:
        assert got == b"" or got[:1] == b"\x15", got.hex()  # nothing, or an alert: never an HTTP answer
    assert_serving(tls, bystander)


def test_truncated_client_hello_then_fin(tls, bystander):
    hello = client_hello(tls.ca)
    with socket.create_connection(("127.0.0.1", tls.port["sni"]), timeout=5) as s:
        s.sendall(hello[: len(hello) // 2])
        s.shutdown(socket.SHUT_WR)
        how, secs, got = wait_closed(s, 5)
    assert how in ("EOF", "RST") and secs < 1.5, (how, secs, got)
    assert_serving(tls, bystander)


def test_client_hello_trickled_one_byte_at_a_time_completes(tls, bystander):
    m = MemTLS(tls.port["sni"], tls.ca)
    try:
        m.handshake(trickle_first=0.0005)  # ~517 segments; the whole hello well inside client_header_timeout
        r = m.request(get("a.test", "/abc.txt"))
        assert (r.status, r.body) == (200, b"abcdefghijklmnopqrstuvwxyz")
    finally:
        m.close()
    assert_serving(tls, bystander)


@pytest.mark.parametrize("part", [20, 0], ids=["partial-hello", "nothing"])
def test_a_stalled_handshake_is_closed_after_client_header_timeout(tls, bystander, part):
    hello = client_hello(tls.ca)
    with socket.create_connection(("127.0.0.1", tls.port["sni"]), timeout=5) as s:
        if part:
            s.sendall(hello[:part])
        how, secs, got = wait_closed(s, 6)
    assert how in ("EOF", "RST"), f"still open after {secs:.1f}s (client_header_timeout 2s)"
    assert 1.5 <= secs <= 3.5, f"closed after {secs:.2f}s, client_header_timeout is 2s"
    assert_serving(tls, bystander)


def test_an_oversized_record_after_the_handshake(tls, bystander):
    m = MemTLS(tls.port["sni"], tls.ca)
    try:
        m.handshake()
        r = m.request(get("a.test", "/abc.txt"))
        assert r.status == 200
        m.sock.sendall(b"\x17\x03\x03\xff\xff" + os.urandom(2000))  # 65535 > 2^14 + 256
        how, secs, _ = wait_closed(m.sock, 5)
        assert how in ("EOF", "RST") and secs < 1.5, (how, secs)
    finally:
        m.close()
    assert_serving(tls, bystander)


def test_a_bad_record_mac_closes_the_connection(tls, bystander):
    m = MemTLS(tls.port["sni"], tls.ca, maxv=ssl.TLSVersion.TLSv1_2)
    try:
        m.handshake()
        m.obj.write(get("a.test", "/abc.txt"))
        rec = bytearray(m.out.read())
        rec[-1] ^= 0x55  # flip bits of the GCM tag
        m.sock.sendall(bytes(rec))
        how, secs, got = wait_closed(m.sock, 5)
        assert how in ("EOF", "RST") and secs < 1.5, (how, secs)
        assert b"HTTP/1.1" not in got
    finally:
        m.close()
    assert_serving(tls, bystander)


def test_tls12_renegotiation_is_refused(tls, bystander):
    """`openssl s_client -tls1_2` then "R": the server answers the new ClientHello with a no_renegotiation
    alert; the connection ends; the server goes on."""
    cmd = ["openssl", "s_client", "-tls1_2", "-connect", f"127.0.0.1:{tls.port['sni']}", "-servername", "a.test",
           "-CAfile", str(tls.ca)]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = b""
    try:
        # Wait for the handshake (s_client prints the session once it is done), then ask to renegotiate.
        os.set_blocking(p.stdout.fileno(), False)
        deadline = time.monotonic() + 10

        def read_until(pred) -> bool:
            nonlocal out
            while time.monotonic() < deadline:
                try:
                    d = p.stdout.read()
                except BlockingIOError:
                    d = None
                if d:
                    out += d
                    if pred(out):
                        return True
                elif d == b"" or p.poll() is not None:
                    try:
                        out += p.stdout.read() or b""
                    except BlockingIOError:
                        pass
                    return pred(out)
                else:
                    time.sleep(0.02)
            return False

        assert read_until(lambda o: b"Extended master secret" in o), out.decode(errors="replace")
        p.stdin.write(b"R\n")
        p.stdin.flush()
        read_until(lambda o: b"no renegotiation" in o or b"alert" in o.split(b"RENEGOTIATING", 1)[-1])
        text = out.decode(errors="replace")
        assert "RENEGOTIATING" in text, text[-2000:]
        assert "no renegotiation" in text, text[-2000:]
        rc = p.wait(5)  # s_client gives up on the connection
        assert rc is not None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    sut.record("s_client renegotiation", out[-3000:])
    assert_serving(tls, bystander)


def test_a_client_that_never_reads_a_1mib_answer(tls, bystander):
    conns = []
    try:
        for _ in range(4):
            c = TLSConn(tls.port["sni"], "a.test", client_ctx(tls.ca))
            c.send(get("a.test", "/rand1m.bin"))
            conns.append(c)
        # Bounded wait until the server has filled this side's receive queue (it is stuck on a full socket).
        deadline = time.monotonic() + 5
        for c in conns:
            while time.monotonic() < deadline:
                queued = int.from_bytes(fcntl.ioctl(c.sock.fileno(), termios.FIONREAD, b"\0\0\0\0"), "little")
                if queued > 32768:
                    break
                time.sleep(0.02)
        assert_serving(tls, bystander)  # while they are stuck
    finally:
        for c in conns:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            c.close()
    assert_serving(tls, bystander)


# ---------------------------------------------------------------------------------------------- proxy to HTTPS


def test_proxy_to_an_https_origin_verified(tls_proxy):
    tls = tls_proxy
    n = len(tls.origin.requests)
    r = sut.request(tls.port["proxy"], "GET", "/verified/x?y=1", host="front.test")
    assert (r.status, r.body) == (200, b"origin /verified/x?y=1 sni=a.test\n"), r
    assert tls.origin.requests[n:] == [("/verified/x?y=1", "a.test")]


def test_proxy_unverified_sends_no_sni(tls_proxy):
    tls = tls_proxy
    r = sut.request(tls.port["proxy"], "GET", "/unverified/z", host="front.test")
    assert (r.status, r.body) == (200, b"origin /unverified/z sni=None\n"), r  # proxy_ssl_server_name off


@pytest.mark.parametrize("path, log", [
    ("/wrong-name/x", 'upstream SSL certificate does not match "wrong.test" while SSL handshaking to upstream'),
    # nginx accepts the chain in the handshake and checks it after (21: "unable to verify the first
    # certificate"); kosoku refuses it during the handshake, where OpenSSL names the missing issuer (20).
    ("/untrusted/x", re.compile(r"upstream SSL certificate verify error: \((20:unable to get local issuer "
                                r"certificate|21:unable to verify the first certificate)\) while SSL handshaking "
                                r"to upstream")),
])
def test_proxy_verification_failures_are_502(tls_proxy, path, log):
    tls = tls_proxy
    n = len(tls.origin.requests)
    r = sut.request(tls.port["proxy"], "GET", path, host="front.test")
    assert r.status == 502, r
    assert tls.origin.requests[n:] == [], "the request went to an origin that failed verification"
    deadline = time.monotonic() + 3
    found = (lambda: log.search(tls.server.error_log()) is not None) if isinstance(log, re.Pattern) else (
        lambda: log in tls.server.error_log())
    while not found() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert found(), tls.server.error_log()[-2000:]


# ---------------------------------------------------------------------------------------------- config errors (-t)


def _check_conf(tmp: Path, pki: Pki, cert: Path, key: Path) -> tuple[sut.ServerProcess, int, str]:
    port = sut.free_port()
    body = f"""
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name a.test;
        ssl_certificate {cert};
        ssl_certificate_key {key};
    }}"""
    s = sut.ServerProcess(sut.SUT, tmp / "conf", body, [port])
    rc, out = s.config_check_output()
    return s, rc, out


def _kosoku_location(s: sut.ServerProcess, out: str, lines: list[int], names: list[Path]) -> None:
    m = re.search(re.escape(str(s.conf_path)) + r":(\d+):(\d+): (.*)", out)
    assert m, f"no '{s.conf_path}:LINE:COL: ...' in:\n{out}"
    assert int(m.group(1)) in lines, f"line {m.group(1)} is not one of {lines}:\n{out}"
    assert any(str(n) in m.group(3) for n in names), f"the message names none of {names}:\n{out}"


def test_config_error_missing_certificate(base, tmp_path):
    tls = base
    missing = tmp_path / "no-such.crt"
    s, rc, out = _check_conf(tmp_path, tls.pki, missing, tls.pki.a.key)
    assert rc != 0, out
    assert str(missing) in out, out
    if sut.SUT == "nginx":
        assert "cannot load certificate" in out
        pytest.skip("kosoku only: FILE:LINE:COL message format (nginx's -t failure checked above)")
    _kosoku_location(s, out, [s.line_of("ssl_certificate ")], [missing])


def test_config_error_key_does_not_match_certificate(base, tmp_path):
    tls = base
    s, rc, out = _check_conf(tmp_path, tls.pki, tls.pki.a.chain, tls.pki.default.key)
    assert rc != 0, out
    if sut.SUT == "nginx":
        assert "key values mismatch" in out and str(tls.pki.default.key) in out, out
        pytest.skip("kosoku only: FILE:LINE:COL message format (nginx's -t failure checked above)")
    _kosoku_location(s, out, [s.line_of("ssl_certificate "), s.line_of("ssl_certificate_key ")],
                     [tls.pki.a.chain, tls.pki.default.key])
