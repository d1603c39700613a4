"""Request header limits as nginx sets them: the bytes (client_header_buffer_size, large_client_header_buffers)
and the number of header lines (max_headers, nginx ≥ 1.29.8, 1000 by default).

- a request with hundreds of small header fields inside the limits is served, statically and through the proxy
  (which forwards every field), and the connection serves the next request;
- more than max_headers lines are refused (kosoku 431, nginx 400), and `max_headers 2000;` lets 1,500 in;
- header bytes past the first buffer and all the large buffers are refused (kosoku 431, nginx 400);
- a line that ends within client_header_buffer_size is not held to the large buffer size (nginx reads it into
  the connection's first buffer): a 12k field or request line under `client_header_buffer_size 16k` is served
  with `large_client_header_buffers 4 8k`, the same line ending past the first 16k is refused.

The same tests run against nginx (SUT=nginx).
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

import sut

BODY = b"header-limits\n"


class EchoOrigin(sut.ScriptedOrigin):
    """Answers every request with 200 and a body of the field names it received, one per line."""

    def serve(self, c: socket.socket) -> None:
        try:
            buf = sut.recv_request_head(c)
            if buf is None:
                return
            lines = buf.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]
            body = b"".join(ln.split(b":", 1)[0] + b"\n" for ln in lines)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        except OSError:
            pass


@dataclass
class Env:
    port: int        # nginx's defaults: client_header_buffer_size 1k, large_client_header_buffers 4 8k
    first16k: int    # client_header_buffer_size 16k, large_client_header_buffers 4 8k
    many: int        # max_headers 2000
    server: sut.ServerProcess


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    work = tmp_path_factory.mktemp("hdrlimits")
    www = work / "www"
    www.mkdir()
    (www / "a.txt").write_bytes(BODY)
    for d in (work, www):
        d.chmod(0o755)
    origin = EchoOrigin()
    port, first16k, many = sut.free_ports(3)
    conf = f"""
    server {{
        listen 127.0.0.1:{port} default_server;
        root {www};
        location /echo/ {{ proxy_pass http://127.0.0.1:{origin.port}; }}
    }}
    server {{
        listen 127.0.0.1:{first16k} default_server;
        client_header_buffer_size 16k;
        large_client_header_buffers 4 8k;
        root {www};
    }}
    server {{
        listen 127.0.0.1:{many} default_server;
        max_headers 2000;
        root {www};
    }}
"""
    srv = sut.ServerProcess(sut.SUT, Path(work), conf, [port, first16k, many])
    srv.start()
    yield Env(port, first16k, many, srv)
    rc = srv.stop()
    origin.close()
    assert rc == 0, f"{sut.SUT} exited with {rc}\n" + srv.diagnostics()


def fields(n: int) -> bytes:
    return b"".join(b"X-Field-%d: v%d\r\n" % (i, i) for i in range(n))


def short_fields(n: int) -> bytes:
    return b"".join(b"F%d:\r\n" % i for i in range(n))


def get(target: bytes, extra: bytes = b"", close: bool = True) -> bytes:
    return (b"GET " + target + b" HTTP/1.1\r\nHost: limits.test\r\n" + extra
            + (b"Connection: close\r\n" if close else b"") + b"\r\n")


def refused_as_too_large(r: sut.Response) -> None:
    if sut.SUT == "nginx":
        assert r.status == 400  # "Request Header Or Cookie Too Large"
    sut.nginx_deviation("nginx answers a too large request header (its bytes or max_headers lines) with 400; "
                        "RFC 6585 §5 defines 431")
    assert r.status == 431


@pytest.mark.parametrize("n", [150, 500])
def test_many_small_header_fields_within_the_limits_are_served(env, n):
    r = sut.exchange(env.port, get(b"/a.txt", fields(n))).one()
    assert (r.status, r.body) == (200, BODY)


def test_more_header_lines_than_max_headers_are_refused(env):
    # Host + 998 fields + Connection: 1,000 lines, the default max_headers.
    r = sut.exchange(env.port, get(b"/a.txt", fields(998))).one()
    assert (r.status, r.body) == (200, BODY)
    ex = sut.exchange(env.port, get(b"/a.txt", fields(999)))
    assert ex.closed
    refused_as_too_large(ex.one())
    log = env.server.error_log()
    assert "too many header lines" in log


def test_max_headers_raises_the_bound(env):
    data = get(b"/a.txt", fields(1500))
    assert len(data) < 32 * 1024  # inside large_client_header_buffers 4 8k
    r = sut.exchange(env.many, data).one()
    assert (r.status, r.body) == (200, BODY)
    # Host + 1,998 fields + Connection: 2,000 lines.
    r = sut.exchange(env.many, get(b"/a.txt", short_fields(1998))).one()
    assert (r.status, r.body) == (200, BODY)
    refused_as_too_large(sut.exchange(env.many, get(b"/a.txt", short_fields(1999))).one())


def test_many_header_fields_are_forwarded_to_the_origin(env):
    r = sut.exchange(env.port, get(b"/echo/x", fields(500))).one()
    assert r.status == 200
    names = r.body.split(b"\n")
    got = [n for n in names if n.startswith(b"X-Field-")]
    assert got == [b"X-Field-%d" % i for i in range(500)]


def test_the_connection_serves_the_next_request_after_many_fields(env):
    with sut.Conn(env.port) as c:
        c.send(get(b"/a.txt", fields(500), close=False))
        r1 = c.read_response()
        c.send(get(b"/a.txt", b"X-One: 1\r\n", close=False))
        r2 = c.read_response()
    assert r1 is not None and (r1.status, r1.body) == (200, BODY)
    assert r2 is not None and (r2.status, r2.body) == (200, BODY)


def test_header_bytes_past_the_large_buffers_are_refused(env):
    # Small fields past 1k + 4 × 8k: the byte bound still holds, whatever the field count.
    ex = sut.exchange(env.port, get(b"/a.txt", fields(3000)))
    assert ex.closed
    refused_as_too_large(ex.one())
    # One field longer than a large buffer.
    ex = sut.exchange(env.port, get(b"/a.txt", b"X-Big: " + b"b" * 9000 + b"\r\n"))
    assert ex.closed
    refused_as_too_large(ex.one())


def test_a_line_within_client_header_buffer_size_may_exceed_a_large_buffer(env):
    big = b"X-Big: " + b"b" * 12000 + b"\r\n"  # longer than one 8k large buffer, inside the 16k first one
    r = sut.exchange(env.first16k, get(b"/a.txt", big)).one()
    assert (r.status, r.body) == (200, BODY)
    r = sut.exchange(env.first16k, get(b"/a.txt?" + b"q" * 12000)).one()
    assert (r.status, r.body) == (200, BODY)
    # The same field ending past the first 16k must fit in one large buffer: refused.
    ex = sut.exchange(env.first16k, get(b"/a.txt", b"X-Pad: " + b"p" * 6000 + b"\r\n" + big))
    assert ex.closed
    refused_as_too_large(ex.one())
    # A request line past the first buffer and longer than a large buffer: 414.
    r = sut.exchange(env.first16k, get(b"/a.txt?" + b"q" * 17000)).one()
    assert r.status == 414
