"""proxy_ignore_client_abort (nginx's ngx_http_proxy_module): a client that closes its side of the connection
(FIN after its request) while the origin is still working abandons the upstream request by default; with
`proxy_ignore_client_abort on` the origin's response is still fetched and sent to the half-closed client.

Runs against nginx too (SUT=nginx).
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import sut

ORIGIN_DELAY_S = 0.6  # the origin answers this long after the request head


class SlowOrigin(sut.ScriptedOrigin):
    """Answers every request ORIGIN_DELAY_S after its head; counts the requests it received, by target (counted
    when the head arrives: the answer may reach the client before this thread counts a write, and an abandoned
    request's write succeeds too, since the kernel takes the bytes before the proxy's close arrives)."""

    def __init__(self):
        super().__init__()
        self.received: dict[str, int] = {}

    def serve(self, c: socket.socket) -> None:
        try:
            head = sut.recv_request_head(c)
            if head is None:
                return
            target = head.split(b" ", 2)[1].decode()
            self.received[target] = self.received.get(target, 0) + 1
            time.sleep(ORIGIN_DELAY_S)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nslow")
        except OSError:
            pass
        finally:
            c.close()


@dataclass
class Env:
    port: int
    origin: SlowOrigin
    server: sut.ServerProcess


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    origin = SlowOrigin()
    port = sut.free_port()
    work = tmp_path_factory.mktemp("ignoreabort")
    o = f"http://127.0.0.1:{origin.port}"
    conf = f"""
    server {{
        listen 127.0.0.1:{port} default_server;
        location / {{ proxy_pass {o}; }}
        location /patient/ {{ proxy_pass {o}; proxy_ignore_client_abort on; }}
    }}
"""
    srv = sut.ServerProcess(sut.SUT, Path(work), conf, [port])
    srv.start()
    yield Env(port, origin, srv)
    rc = srv.stop()
    origin.close()
    assert rc == 0, f"{sut.SUT} exited with {rc}\n" + srv.diagnostics()


def half_closed_get(port: int, target: str) -> bytes:
    """Sends a GET, closes the sending side at once, and reads whatever comes back until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(f"GET {target} HTTP/1.1\r\nHost: origin.test\r\n\r\n".encode())
        c.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    break
                data += d
        except (ConnectionResetError, socket.timeout):
            pass
        return data


def test_a_client_that_closes_its_side_abandons_the_upstream_request_by_default(env):
    assert half_closed_get(env.port, "/a") == b""


def test_proxy_ignore_client_abort_on_still_answers_a_half_closed_client(env):
    data = half_closed_get(env.port, "/patient/a")
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    assert data.endswith(b"\r\n\r\nslow"), data[-200:]
    assert env.origin.received.get("/patient/a") == 1  # fetched once, not retried
