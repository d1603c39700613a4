"""`proxy_socket_keepalive on|off` (nginx's ngx_http_proxy_module, default off): SO_KEEPALIVE on the connections
the proxy opens to its upstreams. The real server (kernel backend; SUT=nginx runs the same config) proxies to
two python origins through two keep-alive upstream groups, one location with the directive on; the kernel's
own view of the cached upstream connections (`ss -o`: a `keepalive` timer) tells which got the option.
kosoku's own TCP (DPDK backend) is covered by the unit test ProxySocketKeepalive.KosokuTcpArmsItsKeepaliveTimer.
"""
from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

import sut

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="iproute2 `ss` is missing")


class _Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps the proxy's connection open for the upstream keepalive cache

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b"origin\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _origin() -> http.server.ThreadingHTTPServer:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _timers_to(port: int) -> list[str]:
    """`ss -tno` lines of the established connections to 127.0.0.1:port (the proxy's upstream side)."""
    r = subprocess.run(["ss", "-tnoH", "state", "established", f"( dport = :{port} )"],
                       capture_output=True, text=True, timeout=10)
    return [l for l in r.stdout.splitlines() if l.strip()]


def test_proxy_socket_keepalive_sets_so_keepalive_on_upstream_connections(tmp_path):
    on, off = _origin(), _origin()
    port = sut.free_port()
    body = f"""
    access_log off;
    upstream with_ka {{ server 127.0.0.1:{on.server_port}; keepalive 4; }}
    upstream without_ka {{ server 127.0.0.1:{off.server_port}; keepalive 4; }}
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    server {{
        listen 127.0.0.1:{port};
        location /on/ {{ proxy_pass http://with_ka; proxy_socket_keepalive on; }}
        location /off/ {{ proxy_pass http://without_ka; }}
    }}
"""
    srv = sut.ServerProcess(sut.SUT, tmp_path, body, [port], workers=1).start()
    try:
        for path in ("/on/x", "/off/x"):
            r = subprocess.run(["curl", "-sS", "-m", "5", f"http://127.0.0.1:{port}{path}"],
                               capture_output=True, text=True, timeout=10)
            assert r.stdout == "origin\n", (path, r.stdout, r.stderr)
        with_ka, without_ka = _timers_to(on.server_port), _timers_to(off.server_port)
        assert len(with_ka) == 1 and "timer:(keepalive," in with_ka[0], with_ka
        assert len(without_ka) == 1 and "keepalive" not in without_ka[0], without_ka
    finally:
        srv.stop()
        on.shutdown()
        off.shutdown()


def test_proxy_socket_keepalive_value_is_checked(tmp_path):
    r = sut.ServerProcess(sut.SUT, tmp_path, "    proxy_socket_keepalive yes;\n", []).check_config()
    err = r.stderr.decode()
    assert r.returncode != 0
    assert "invalid value \"yes\" in \"proxy_socket_keepalive\" directive, it must be \"on\" or \"off\"" in err, err
