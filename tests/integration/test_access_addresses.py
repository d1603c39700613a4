"""allow/deny (nginx's ngx_http_access_module) told apart by real client addresses: kosoku runs inside a network
namespace made for the test, whose loopback carries two more addresses, and the clients connect from each
(bound source address), so the rules see two different peers over real TCP. Checked: first match wins, CIDR
rules, `all`, rules inherited from server into location and replaced by a location's own list, the 403 with
nginx's error-log line (`access forbidden by rule, client: ADDR`), `$remote_addr` in the access log, and the
same over IPv6 (two addresses of a ULA prefix on the namespace's loopback). Nothing leaves the namespace.

Skips with a clear message when network namespaces cannot be made (not root, no CAP_NET_ADMIN).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sut

NS = f"kosoku-acl-{os.getpid()}"
A1, A2, A3 = "10.99.77.1", "10.99.77.2", "10.99.78.3"
B1, B2 = "fd00:77::1", "fd00:77::2"


def _skip_reason() -> str | None:
    if sut.SUT != "kosoku":
        return "runs the kosoku binary inside a namespace"
    if shutil.which("ip") is None:
        return "iproute2 `ip` is missing"
    r = subprocess.run(["ip", "netns", "add", f"{NS}-probe"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"network namespaces unavailable (`ip netns add` failed: {r.stderr.strip()})"
    subprocess.run(["ip", "netns", "del", f"{NS}-probe"], capture_output=True)
    return None


_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

# The client, run inside the namespace: one request per (source address, target), the status codes as JSON.
CLIENT = r"""
import json, socket, sys
port = int(sys.argv[1]); out = []
for src, dst, target in json.loads(sys.argv[2]):
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(5)
    s.bind((src, 0)); s.connect((dst, port))
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: acl\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b: break
        data += b
    s.close()
    out.append(int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else -1)
print(json.dumps(out))
"""


def ns(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", NS, *args], check=check, capture_output=True, text=True,
                          timeout=60, **kw)


@pytest.fixture
def namespace():
    subprocess.run(["ip", "netns", "add", NS], check=True, capture_output=True)
    try:
        ns("ip", "link", "set", "lo", "up")
        for a in (A1, A2, A3):
            ns("ip", "addr", "add", f"{a}/32", "dev", "lo")
        for b in (B1, B2):
            ns("ip", "-6", "addr", "add", f"{b}/128", "dev", "lo", "nodad")
        yield
    finally:
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)


def test_allow_deny_by_client_address(tmp_path, namespace):
    os.chmod(tmp_path, 0o755)
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("hello\n")
    for d in ("open", "own", "v6", "net"):
        (www / d).mkdir()
        (www / d / "index.html").write_text(f"{d}\n")
    port = 8080
    conf = tmp_path / "k.conf"
    conf.write_text(f"""
worker_processes 2;
error_log {tmp_path}/error.log info;
events {{ worker_connections 256; }}
http {{
    log_format acl '$remote_addr $status $request_uri';
    access_log {tmp_path}/access.log acl;
    server {{
        listen {port};
        listen [::]:{port};
        root {www};
        allow {A1};
        deny {A2};
        allow 10.99.78.0/24;
        deny all;
        location /open/ {{ allow all; }}
        location /own/ {{ deny {A1}; allow 10.99.77.0/30; deny all; }}
        location /v6/ {{ allow {B1}; deny all; }}
        location /net/ {{ deny 10.99.78.0/24; allow all; }}
    }}
}}
""")
    proc = subprocess.Popen(["ip", "netns", "exec", NS, str(Path(sut.kosoku_bin()).resolve()), "-c", str(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10 * sut.SLOWDOWN
        while ns(sys.executable, "-c", f"import socket; socket.create_connection(('{A1}', {port}), 0.3)",
                 check=False).returncode != 0:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "kosoku did not start listening in the namespace"
            time.sleep(0.1)
        cases = [
            # (source, destination, target, expected status)
            (A1, A1, "/", 200), (A2, A1, "/", 403), (A3, A1, "/", 200), ("127.0.0.1", "127.0.0.1", "/", 403),
            (A1, A1, "/open/", 200), (A2, A1, "/open/", 200), ("127.0.0.1", "127.0.0.1", "/open/", 200),
            (A1, A1, "/own/", 403), (A2, A1, "/own/", 200), (A3, A1, "/own/", 403),
            (B1, B1, "/v6/", 200), (B2, B1, "/v6/", 403), (A1, A1, "/v6/", 403),
            (B1, B1, "/", 403),
            (A3, A1, "/net/", 403), (A2, A1, "/net/", 200),
        ]
        r = ns(sys.executable, "-c", CLIENT, str(port), json.dumps([c[:3] for c in cases]))
        got = json.loads(r.stdout)
        want = [c[3] for c in cases]
        assert got == want, "\n".join(f"{c[0]} -> {c[2]}: got {g}, want {w}"
                                      for c, g, w in zip(cases, got, want) if g != w)
        time.sleep(0.3)
        log = (tmp_path / "error.log").read_text()
        assert f"access forbidden by rule, client: {A2}" in log
        assert f"access forbidden by rule, client: {B2}" in log
        assert "access forbidden by rule, client: 127.0.0.1" in log
        access = (tmp_path / "access.log").read_text().splitlines()
        assert f"{A2} 403 /" in access and f"{B1} 200 /v6/" in access and f"{A3} 403 /net/" in access, access
    finally:
        if proc.poll() is None:
            proc.terminate()
        rc = proc.wait(timeout=15 * sut.SLOWDOWN)
    assert rc == 0, proc.stderr.read().decode()[-3000:]
