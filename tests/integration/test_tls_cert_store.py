"""Certificates added at run time reach the TLS handshake (core/tls/ + core/certs/): SNI picks a certificate
PUT through the admin API on the very next handshake on every core, a replaced certificate replaces it, a
deleted one falls back to the server's; 1,000 hosts with `ssl_certificate_cache 100` are served byte-exact
through eviction and reload; after a restart with a cold page cache the stored certificates are read through
the disk queue while their handshakes wait. Real binary, real TCP, python ssl clients. Skipped when
SUT=nginx (kosoku's own directives)."""
import hashlib
import http.client
import random
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

import sut

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku-only directives (ssl_certificate_store)")

BODY = b"<p>stored certificates</p>\n" * 37


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Pki:
    """Self-signed P-256 certificates sharing one key (quick to make in bulk): host -> PEM bytes."""

    def __init__(self, d: Path):
        self.dir = d
        d.mkdir(exist_ok=True)
        self.key = d / "shared.key"
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(self.key))

    def make(self, host: str) -> tuple[bytes, bytes]:
        cert = self.dir / f"{host.replace('*', '_')}.crt"
        openssl("req", "-x509", "-key", str(self.key), "-out", str(cert), "-days", "30", "-subj", f"/CN={host}")
        return cert.read_bytes(), self.key.read_bytes()


def der_of(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


class Server:
    def __init__(self, tmp: Path, cache: int):
        self.tmp, self.cache = tmp, cache
        self.tls_port, self.admin_port = sut.free_port(), sut.free_port()
        (tmp / "www").mkdir(exist_ok=True)
        (tmp / "www" / "index.html").write_bytes(BODY)
        Pki(tmp / "default")  # its key makes the default certificate below
        openssl("req", "-x509", "-key", str(tmp / "default" / "shared.key"), "-out", str(tmp / "default.crt"),
                "-days", "30", "-subj", "/CN=default.test")
        self.default_der = der_of((tmp / "default.crt").read_bytes())
        self.conf = tmp / "k.conf"
        self.conf.write_text(f"""
worker_processes 2;
error_log {tmp}/error.log info;
pid {tmp}/k.pid;
http {{
    access_log off;
    ssl_certificate_store {tmp}/store;
    ssl_certificate_cache {cache} inactive=10m;
    server {{
        listen 127.0.0.1:{self.tls_port} ssl default_server;
        ssl_certificate {tmp}/default.crt;
        ssl_certificate_key {tmp}/default/shared.key;
        root {tmp}/www;
    }}
    server {{
        listen 127.0.0.1:{self.admin_port};
        location /admin/ {{ ssl_certificate_admin; allow 127.0.0.1; deny all; }}
        location = /status {{ status; }}
    }}
}}
""")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([sut.kosoku_bin(), "-c", str(self.conf)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.tmp / "stderr.log", "ab"))
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.admin_port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((self.tmp / "stderr.log").read_text())
                time.sleep(0.05)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.proc = None

    def admin(self, method: str, host: str, body: bytes | None = None) -> int:
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=30)
        c.request(method, f"/admin/certs/{host}", body=body)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status

    def put_many(self, items: list[tuple[str, bytes]]):
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=60)  # keep-alive
        for host, body in items:
            c.request("PUT", f"/admin/certs/{host}", body=body)
            r = c.getresponse()
            r.read()
            assert r.status in (200, 201), (host, r.status)
        c.close()

    def handshake(self, name: str, path: str | None = None) -> tuple[bytes, bytes | None]:
        """The certificate (DER) presented for SNI `name`, and the body of GET `path` on that connection."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", self.tls_port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=name) as s:
                der = s.getpeercert(binary_form=True)
                body = None
                if path is not None:
                    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
                    data = b""
                    while chunk := s.recv(65536):
                        data += chunk
                    head, _, body = data.partition(b"\r\n\r\n")
                    assert head.startswith(b"HTTP/1.1 200"), head
                return der, body

    def metric(self, name: str) -> float:
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=10)
        c.request("GET", "/status?format=prometheus")
        text = c.getresponse().read().decode()
        c.close()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if not line.startswith("#") and name in line.split("{")[0])


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path, cache=100)
    s.start()
    yield s
    s.stop()


def test_a_put_certificate_is_used_by_the_next_handshake_on_every_core(server, tmp_path):
    pki = Pki(tmp_path / "pki")
    first = pki.make("b.test")
    assert server.handshake("b.test")[0] == server.default_der  # not stored yet: the server's own
    assert server.admin("PUT", "b.test", first[0] + first[1]) == 201
    # Sixteen new connections land on both cores (SO_REUSEPORT): each presents the stored certificate.
    for _ in range(16):
        assert server.handshake("b.test")[0] == der_of(first[0])
    second = Pki(tmp_path / "pki2").make("b.test")  # a new key and certificate for the same name
    assert server.admin("PUT", "b.test", second[0] + second[1]) == 200
    for _ in range(16):
        assert server.handshake("B.Test")[0] == der_of(second[0])  # names compare case-insensitively
    wild = pki.make("*.w.test")
    assert server.admin("PUT", "*.w.test", wild[0] + wild[1]) == 201
    assert server.handshake("x.w.test")[0] == der_of(wild[0])
    assert server.handshake("y.x.w.test")[0] == server.default_der  # a wildcard covers one label
    assert server.admin("DELETE", "b.test") == 200
    for _ in range(8):
        assert server.handshake("b.test")[0] == server.default_der


def test_thousand_hosts_through_a_cache_of_a_hundred(server, tmp_path):
    pki = Pki(tmp_path / "pki")
    hosts = [f"h{i}.bulk.test" for i in range(1000)]
    made = {h: pki.make(h) for h in hosts}
    server.put_many([(h, made[h][0] + made[h][1]) for h in hosts])
    rng = random.Random(7)
    for round_ in range(2):
        order = hosts[:]
        rng.shuffle(order)
        for h in order:
            der, body = server.handshake(h, "/index.html")
            assert der == der_of(made[h][0]), (round_, h)
            assert body == BODY, (round_, h)
    # Two cores with 100 entries each cannot hold 1,000: the second round reloaded what was evicted.
    assert server.metric("ssl_cert_cache_evictions_total") >= 1000
    assert server.metric("ssl_cert_cache_loads_total") >= 1800
    assert server.metric("ssl_cert_cache_entries") <= 200
    assert server.metric("ssl_cert_cache_failures_total") == 0


def test_stored_certificates_survive_a_restart_read_from_a_cold_page_cache(tmp_path):
    s = Server(tmp_path, cache=100)
    s.start()
    pki = Pki(tmp_path / "pki")
    hosts = [f"r{i}.restart.test" for i in range(40)]
    made = {h: pki.make(h) for h in hosts}
    s.put_many([(h, made[h][0] + made[h][1]) for h in hosts])
    s.stop()
    subprocess.run(["sync"], check=False)
    try:  # a cold page cache makes every certificate read a real disk read (the handshake waits for it)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass
    s.start()
    try:
        for h in hosts:
            der, body = s.handshake(h, "/index.html")
            assert der == der_of(made[h][0]), h
            assert body == BODY
        assert s.metric("ssl_cert_cache_failures_total") == 0
        assert s.metric("tls_handshakes_waiting") == 0  # every suspended handshake resumed
    finally:
        s.stop()
