"""The TLS certificate store, end to end against the real binary (core/certs/): the admin API over real TCP
(`ssl_certificate_admin;` behind allow/deny) — PUT/GET/HEAD/DELETE, listing with paging, validation (bad PEM,
key mismatch, expired and not-yet-valid certificates answer 400 and keep the old certificate), persistence
across a restart and across a SIGKILL right after a 201, the start refused on an unusable store directory and
`kosoku -t`, and the cache counters in the status output.

Certificates are made with the openssl CLI (OpenSSL 3.0: `req -x509` for valid ones, `ca -selfsign
-startdate/-enddate` for expired and future ones). Each test starts its own kosoku (2 workers, so a change
made through one core is read back through either). Skipped when SUT=nginx (kosoku's own directives)."""
import http.client
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import sut

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku-only directives (ssl_certificate_*)")


def openssl(*args, cwd=None):
    subprocess.run(["openssl", *args], check=True, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Certs:
    """Test certificates under `dir`: each is (cert_pem, key_pem) as bytes."""

    def __init__(self, tmp: Path):
        self.dir = tmp / "pki"
        self.dir.mkdir(exist_ok=True)
        self.n = 0

    def _paths(self):
        self.n += 1
        return self.dir / f"c{self.n}.pem", self.dir / f"k{self.n}.pem"

    def make(self, cn, kind="ec"):
        c, k = self._paths()
        newkey = ["-newkey", "rsa:2048"] if kind == "rsa" else ["-newkey", "ec", "-pkeyopt",
                                                                  "ec_paramgen_curve:P-256"]
        openssl("req", "-x509", *newkey, "-nodes", "-keyout", str(k), "-out", str(c), "-days", "30",
                "-subj", f"/CN={cn}")
        return c.read_bytes(), k.read_bytes()

    def dated(self, cn, start, end):
        """A self-signed P-256 certificate valid from `start` to `end` (YYYYMMDDHHMMSSZ)."""
        c, k = self._paths()
        ca = self.dir / f"ca{self.n}"
        ca.mkdir()
        (ca / "index.txt").write_text("")
        (ca / "serial").write_text("01\n")
        (ca / "ca.cnf").write_text("[ca]\ndefault_ca=x\n[x]\ndir=.\ndatabase=./index.txt\nnew_certs_dir=.\n"
                                   "serial=./serial\ndefault_md=sha256\npolicy=p\nunique_subject=no\n"
                                   "[p]\ncommonName=supplied\n")
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                str(k), "-out", "r.csr", "-subj", f"/CN={cn}", cwd=ca)
        openssl("ca", "-batch", "-config", "ca.cnf", "-selfsign", "-keyfile", str(k), "-in", "r.csr", "-out",
                str(c), "-startdate", start, "-enddate", end, cwd=ca)
        return c.read_bytes(), k.read_bytes()

    @staticmethod
    def fingerprint(cert_pem):
        out = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256"], input=cert_pem,
                             check=True, capture_output=True).stdout.decode()
        return out.strip().split("=", 1)[1]


class Kosoku:
    def __init__(self, tmp: Path, store: str | None = None, workers: int = 2, http_extra: str = ""):
        self.dir = tmp
        self.port = sut.free_port()
        self.store = Path(store) if store else tmp / "certs"
        self.conf = tmp / "k.conf"
        self.conf.write_text(f"""
worker_processes {workers};
error_log {tmp}/error.log info;
events {{ worker_connections 1024; }}
http {{
    ssl_certificate_store {self.store};
    ssl_certificate_cache 100 inactive=1m;
    {http_extra}
    server {{
        listen 127.0.0.1:{self.port} default_server;
        root {tmp};
        location /admin/ {{
            ssl_certificate_admin;
            client_max_body_size 4m;
            allow 127.0.0.1;
            deny all;
        }}
        location /locked/ {{
            ssl_certificate_admin;
            deny all;
        }}
        location = /status {{ status; }}
    }}
}}
""")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([sut.kosoku_bin(), "-c", str(self.conf)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 15 * sut.SLOWDOWN
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"kosoku exited {self.proc.returncode}: {self.proc.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError("kosoku did not start listening")

    def stop(self, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout=timeout * sut.SLOWDOWN)
        return self.proc.returncode if self.proc else 0

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10 * sut.SLOWDOWN)
        c.request(method, path, body=body, headers={"Host": "admin.example"})
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def api(self, method, path, body=None, prefix="/admin/certs"):
        status, hdrs, data = self.request(method, prefix + path, body)
        doc = json.loads(data) if data and method != "HEAD" else None
        return status, hdrs, doc

    def error_log(self):
        p = self.dir / "error.log"
        return p.read_text() if p.exists() else ""


@pytest.fixture
def certs(tmp_path):
    return Certs(tmp_path)


@pytest.fixture
def server(tmp_path):
    k = Kosoku(tmp_path).start()
    yield k
    assert k.stop() == 0, k.proc.stderr.read().decode()


def test_crud(server, certs):
    rsa_cert, rsa_key = certs.make("a.example", "rsa")
    assert server.api("GET", "/a.example")[0] == 404
    status, hdrs, doc = server.api("PUT", "/A.Example", rsa_cert + rsa_key)
    assert status == 201, doc
    assert hdrs["content-type"] == "application/json" and hdrs["cache-control"] == "no-store"
    assert doc["host"] == "a.example"
    assert doc["subject"] == "CN=a.example" and doc["issuer"] == "CN=a.example"
    assert doc["key_type"] == "RSA-2048"
    assert doc["sha256_fingerprint"] == certs.fingerprint(rsa_cert)
    assert doc["not_before"].endswith("Z") and doc["not_after"] > doc["not_before"]
    assert doc["chain_certs"] == 1
    # Read back (several times: both cores, loaded through their caches), never with the key.
    for _ in range(4):
        status, _, data = server.request("GET", "/admin/certs/a.example")
        assert status == 200
        assert b"PRIVATE" not in data
        assert json.loads(data) == doc
    status, hdrs, data = server.request("HEAD", "/admin/certs/a.example")
    assert status == 200 and data == b"" and int(hdrs["content-length"]) > 0

    # Replaced by an ECDSA certificate: 200, and every core serves the new one.
    ec_cert, ec_key = certs.make("a.example")
    status, _, doc = server.api("PUT", "/a.example", ec_key + ec_cert)  # key first is fine
    assert status == 200, doc
    assert doc["key_type"] == "ECDSA-P-256"
    for _ in range(4):
        assert server.api("GET", "/a.example")[2]["sha256_fingerprint"] == certs.fingerprint(ec_cert)

    # A wildcard, written as is or percent-encoded.
    w_cert, w_key = certs.make("*.wild.example")
    status, _, doc = server.api("PUT", "/*.wild.example", w_cert + w_key)
    assert status == 201 and doc["host"] == "*.wild.example", doc
    assert server.api("GET", "/%2A.wild.example")[2]["host"] == "*.wild.example"

    status, _, doc = server.api("PUT", "/bad..host", ec_cert + ec_key)
    assert status == 400 and "invalid host" in doc["error"]
    status, hdrs, _ = server.api("POST", "/a.example", b"x")
    assert status == 405 and hdrs["allow"] == "GET, HEAD, PUT, DELETE"
    assert server.api("PUT", "", b"x")[0] == 405
    assert server.request("GET", "/admin/other")[0] == 404

    status, _, doc = server.api("DELETE", "/a.example")
    assert (status, doc) == (200, {"host": "a.example", "deleted": True})
    assert server.api("GET", "/a.example")[0] == 404
    assert server.api("DELETE", "/a.example")[0] == 404
    assert "certificate(s) indexed in" in server.error_log()


def test_invalid_bodies_answer_400_and_keep_the_old_certificate(server, certs):
    cert, key = certs.make("b.example")
    assert server.api("PUT", "/b.example", cert + key)[0] == 201
    fp = certs.fingerprint(cert)
    other_cert, other_key = certs.make("other.example")
    expired = certs.dated("b.example", "20200101000000Z", "20200102000000Z")
    future = certs.dated("b.example", "20500101000000Z", "20510101000000Z")
    cases = [
        (b"", "no certificate"),
        (b"not a PEM at all", "no certificate"),
        (key, "no certificate"),
        (cert, "no private key"),
        (cert + other_key, "does not match"),
        (other_cert + cert + key, "does not match"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" + key, "does not parse"),
        (expired[0] + expired[1], "expired"),
        (future[0] + future[1], "not yet valid"),
    ]
    for body, want in cases:
        status, hdrs, doc = server.api("PUT", "/b.example", body)
        assert status == 400, (want, status, doc)
        assert hdrs["content-type"] == "application/json"
        assert want in doc["error"], (want, doc)
        assert server.api("GET", "/b.example")[2]["sha256_fingerprint"] == fp
    # A new host with a bad body is not created.
    assert server.api("PUT", "/new.example", cert + other_key)[0] == 400
    assert server.api("GET", "/new.example")[0] == 404
    status, _, doc = server.api("PUT", "/b.example", b"x" * (1024 * 1024 + 1))
    assert status == 413, doc
    assert server.api("GET", "/b.example")[2]["sha256_fingerprint"] == fp


def test_list_is_paginated(server, certs):
    cert, key = certs.make("list.example")
    hosts = {f"h{i:02d}.example" for i in range(23)}
    for h in hosts:
        assert server.api("PUT", "/" + h, cert + key)[0] == 201
    pages = []
    for offset in range(0, 30, 5):
        status, _, doc = server.api("GET", f"?offset={offset}&limit=5")
        assert status == 200
        assert (doc["count"], doc["offset"], doc["limit"]) == (23, offset, 5)
        pages += doc["hosts"]
    assert len(pages) == 23 and set(pages) == hosts
    status, _, doc = server.api("GET", "")
    assert doc["count"] == 23 and doc["hosts"] == pages  # stable order
    assert server.api("GET", "/")[2]["hosts"] == pages
    status, _, doc = server.api("GET", "?limit=100000")
    assert doc["limit"] == 1000
    assert server.api("DELETE", "")[0] == 405


def test_persistence_across_restart_and_sigkill(tmp_path, certs):
    k = Kosoku(tmp_path).start()
    c1, k1 = certs.make("keep.example")
    c2, k2 = certs.make("killed.example", "rsa")
    gone_c, gone_k = certs.make("gone.example")
    try:
        assert k.api("PUT", "/keep.example", c1 + k1)[0] == 201
        assert k.api("PUT", "/gone.example", gone_c + gone_k)[0] == 201
    finally:
        assert k.stop() == 0, k.proc.stderr.read().decode()
    k = Kosoku(tmp_path).start()
    try:
        assert k.api("GET", "/keep.example")[2]["sha256_fingerprint"] == certs.fingerprint(c1)
        # SIGKILL right after the answers: what was answered is on disk.
        assert k.api("PUT", "/killed.example", c2 + k2)[0] == 201
        assert k.api("DELETE", "/gone.example")[0] == 200
    finally:
        k.kill()
    files = sorted(p.name for p in (tmp_path / "certs").rglob("*.pem"))
    assert files == ["keep.example.pem", "killed.example.pem"], files
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in (tmp_path / "certs").rglob("*.pem"))
    k = Kosoku(tmp_path).start()
    try:
        status, _, doc = k.api("GET", "/killed.example")
        assert status == 200 and doc["sha256_fingerprint"] == certs.fingerprint(c2)
        assert doc["key_type"] == "RSA-2048"
        assert k.api("GET", "/gone.example")[0] == 404
        assert k.api("GET", "")[2]["count"] == 2
        assert "ssl_certificate_store" in k.error_log() and "2 certificate(s) indexed" in k.error_log()
    finally:
        assert k.stop() == 0, k.proc.stderr.read().decode()


def test_allow_deny_guard_the_api(server, certs):
    cert, key = certs.make("g.example")
    assert server.request("PUT", "/locked/certs/g.example", cert + key)[0] == 403
    assert server.request("GET", "/locked/certs")[0] == 403
    assert server.request("DELETE", "/locked/certs/g.example")[0] == 403
    assert server.api("GET", "/g.example")[0] == 404  # nothing was stored


def test_cache_counters_in_status(server, certs):
    cert, key = certs.make("s.example")
    assert server.api("PUT", "/s.example", cert + key)[0] == 201
    for _ in range(3):
        assert server.api("GET", "/s.example")[0] == 200
    status, _, data = server.request("GET", "/status?format=json")
    assert status == 200
    doc = json.loads(data)
    metrics = doc["extra"]["ssl_certificate_cache"]
    by_name = {}
    for m in metrics:
        by_name[m["name"]] = by_name.get(m["name"], 0) + m["value"]
    assert by_name["ssl_cert_cache_loads_total"] >= 1
    assert by_name["ssl_cert_cache_loads_total"] + by_name["ssl_cert_cache_hits_total"] == 3
    assert by_name["ssl_cert_store_hosts"] == 1
    status, _, data = server.request("GET", "/status?format=prometheus")
    text = data.decode()
    assert status == 200
    assert '# TYPE kosoku_ssl_cert_cache_hits_total counter' in text, text
    assert 'kosoku_ssl_cert_cache_loads_total{core="0"}' in text
    assert 'kosoku_ssl_cert_store_hosts 1' in text


def test_unusable_store_refuses_to_start(tmp_path):
    (tmp_path / "afile").write_text("x")
    k = Kosoku(tmp_path, store=str(tmp_path / "afile"))
    r = subprocess.run([sut.kosoku_bin(), "-t", "-c", str(k.conf)], capture_output=True, timeout=30)
    assert r.returncode == 1 and b"ssl_certificate_store" in r.stderr and b"is not a directory" in r.stderr, r
    p = subprocess.run([sut.kosoku_bin(), "-c", str(k.conf)], capture_output=True, timeout=30 * sut.SLOWDOWN)
    assert p.returncode != 0
    assert b"is not a directory" in p.stderr + (tmp_path / "error.log").read_bytes(), p
    # The admin location without a store is a configuration error.
    conf = tmp_path / "bad.conf"
    conf.write_text("events {}\nhttp { server { listen 127.0.0.1:1; location /a/ { ssl_certificate_admin; } } }\n")
    r = subprocess.run([sut.kosoku_bin(), "-t", "-c", str(conf)], capture_output=True, timeout=30)
    assert r.returncode == 1 and b"needs \"ssl_certificate_store\"" in r.stderr, r
    # A missing store directory is created.
    k = Kosoku(tmp_path, store=str(tmp_path / "fresh")).start()
    try:
        assert k.api("GET", "")[2]["count"] == 0
        assert (tmp_path / "fresh").is_dir()
    finally:
        assert k.stop() == 0
