"""Header and log injection through variables: a client's percent-encoded CR LF (and other control bytes)
that decoding put into `$uri` must never split a response field, a field of the request sent upstream, or
an error-log / access-log line.

One server (module fixture) with a location per way a variable becomes a header value: `return 302` with
`$host$uri`, `add_header` with `$uri`, `$args`, `$request_uri`, `add_header Location $uri`, `proxy_set_header`
with `$uri` towards a python origin that records the raw bytes it receives, `proxy_redirect` with `$uri` in
its replacement, and the 301 to a directory's trailing slash (a directory whose name holds CR LF). Every
response head is checked field by field: exactly the expected names, no injected `Set-Cookie`.

nginx 1.22 lets a decoded `$uri` split `return`'s Location and `add_header`'s value (the brief's finding):
those tests skip for SUT=nginx after saying so (sut.nginx_deviation); the directory redirect, `$args` and
the access log behave the same in both.
"""
from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import pytest

import sut

# `%0d%0a` followed by a forged field: what an attacker puts in a link.
INJECT = "%0d%0aSet-Cookie:%20evil=1"
# The decoded form of INJECT as $uri holds it.
DECODED = "\r\nSet-Cookie: evil=1"


class RecordingOrigin:
    """An HTTP/1.1 origin on 127.0.0.1 that keeps the raw head of every request it reads and answers
    200 "origin\\n", or 302 to http://origin.invalid/next for targets under /pr/."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.heads: list[bytes] = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        c.settimeout(5)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                with self.lock:
                    self.heads.append(head)
                target = head.split(b"\r\n", 1)[0].split(b" ")[1]
                if target.startswith(b"/pr/"):
                    c.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://origin.invalid/next\r\n"
                              b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                else:
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n"
                              b"Connection: close\r\n\r\norigin\n")
                return
        except OSError:
            pass
        finally:
            c.close()

    def last_head(self) -> bytes:
        with self.lock:
            return self.heads[-1]

    def close(self) -> None:
        self.stopping = True
        self.sock.close()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    work = tmp_path_factory.mktemp("inject")
    www = work / "www"
    www.mkdir()
    (www / "index.html").write_bytes(b"index\n")
    # A directory whose name holds CR LF and a forged field: the 301 to its slash form must escape it.
    evil_dir = www / ("d" + DECODED)
    evil_dir.mkdir()
    (evil_dir / "index.html").write_bytes(b"evil dir\n")
    origin = RecordingOrigin()
    port = sut.free_port()
    body = f"""
    log_format uri_default '$uri|$request';
    log_format uri_json escape=json '$uri';
    server {{
        listen 127.0.0.1:{port} default_server;
        server_name inj.example;
        root {www};
        access_log {work}/access.log;
        access_log {work}/uri.log uri_default;
        access_log {work}/uri.json.log uri_json;
        location /r/ {{ return 302 http://$host$uri; }}
        location /u/ {{ add_header X-U $uri always; return 200 "ok\\n"; }}
        location /a/ {{ add_header X-A $args always; add_header X-R $request_uri always; return 200 "ok\\n"; }}
        location /l/ {{ add_header Location $uri always; return 200 "ok\\n"; }}
        location /p/ {{ proxy_pass http://127.0.0.1:{origin.port}; proxy_set_header X-Orig-Uri $uri; }}
        location /pr/ {{
            proxy_pass http://127.0.0.1:{origin.port};
            proxy_redirect http://origin.invalid/ http://$host$uri/;
        }}
    }}
"""
    server = sut.ServerProcess(sut.SUT, work, body, [port]).start()
    yield type("Srv", (), {"port": port, "server": server, "work": work, "origin": origin})
    server.stop()
    origin.close()


def get(srv, target: str, host: str = "inj.example") -> sut.Response:
    return sut.request(srv.port, "GET", target, host=host)


def field_names(r: sut.Response) -> list[str]:
    return sorted(k.lower() for k, _ in r.headers)


def assert_head_is_clean(r: sut.Response) -> None:
    """No field the client forged, and no CR/LF/NUL inside any field line of the raw head."""
    assert not r.has("Set-Cookie"), r.raw_head
    for line in r.raw_head.split(b"\r\n"):
        assert b"\r" not in line and b"\n" not in line and b"\0" not in line, r.raw_head
    assert b"\r\nSet-Cookie" not in r.raw_head, r.raw_head


def base_names(r: sut.Response) -> set[str]:
    """The fields every answer of this server carries whatever the test (Server, Date, framing ...)."""
    return {"server", "date", "content-length", "connection"} | ({"content-type"} if r.has("Content-Type") else set())


def test_return_redirect_percent_encodes_controls_from_uri(srv):
    r = get(srv, "/r/a" + INJECT)
    sut.nginx_deviation("nginx 1.22 copies the decoded $uri into return's Location: CR LF split the field")
    assert_head_is_clean(r)
    assert r.status == 302
    assert r.header("Location") == "http://inj.example/r/a%0D%0ASet-Cookie:%20evil=1"
    assert field_names(r) == sorted(base_names(r) | {"location"})


@pytest.mark.parametrize("ctl", ["%01", "%0b", "%1b", "%7f", "%09"])
def test_return_redirect_percent_encodes_every_control_byte(srv, ctl):
    r = get(srv, f"/r/x{ctl}y")
    sut.nginx_deviation("nginx 1.22 copies the decoded $uri into return's Location as it is")
    assert_head_is_clean(r)
    assert r.header("Location") == f"http://inj.example/r/x{ctl.upper()}y"


def test_add_header_uri_replaces_controls_with_space(srv):
    r = get(srv, "/u/a" + INJECT + "%1bz")
    sut.nginx_deviation("nginx 1.22 copies the decoded $uri into add_header's value: CR LF split the field")
    assert_head_is_clean(r)
    assert r.status == 200 and r.body == b"ok\n"
    # RFC 9110 §5.5: SP for each CR, LF (and any other control byte) of the variable's value.
    assert r.header_list("X-U") == ["/u/a  Set-Cookie: evil=1 z"]
    assert field_names(r) == sorted(base_names(r) | {"x-u"})


def test_add_header_location_percent_encodes_uri(srv):
    r = get(srv, "/l/a" + INJECT)
    sut.nginx_deviation("nginx 1.22 copies the decoded $uri into add_header's value")
    assert_head_is_clean(r)
    assert r.header_list("Location") == ["/l/a%0D%0ASet-Cookie:%20evil=1"]
    assert field_names(r) == sorted(base_names(r) | {"location"})


def test_add_header_args_and_request_uri_stay_as_received(srv):
    # $args and $request_uri are not decoded: the encoded CR LF stays encoded, the field is not split.
    r = get(srv, "/a/x" + INJECT + "?q=1" + INJECT)
    assert_head_is_clean(r)
    assert r.status == 200
    assert r.header_list("X-A") == ["q=1" + INJECT]
    assert r.header_list("X-R") == ["/a/x" + INJECT + "?q=1" + INJECT]
    assert field_names(r) == sorted(base_names(r) | {"x-a", "x-r"})


def test_proxy_set_header_uri_reaches_origin_without_controls(srv):
    r = get(srv, "/p/a%0d%0aX-Injected:%201%1b%7fz")
    assert r.status == 200 and r.body == b"origin\n", r
    head = srv.origin.last_head()
    lines = head.split(b"\r\n")
    assert lines[0].startswith(b"GET /p/a%0d%0aX-Injected:%201%1b%7fz HTTP/1."), lines[0]
    sut.nginx_deviation("nginx 1.22 copies the decoded $uri into proxy_set_header's value")
    names = [ln.split(b":", 1)[0].lower() for ln in lines[1:]]
    assert b"x-injected" not in names, head
    assert names.count(b"x-orig-uri") == 1, head
    value = [ln.split(b":", 1)[1].strip() for ln in lines[1:] if ln.lower().startswith(b"x-orig-uri:")][0]
    for line in lines:
        assert not re.search(rb"[\x00-\x08\x0a-\x1f\x7f]", line), head
    # Every control byte but HTAB became SP (RFC 9110 §5.5).
    assert value == b"/p/a  X-Injected: 1  z", head


def test_proxy_redirect_with_uri_cannot_split_location(srv):
    r = get(srv, "/pr/a" + INJECT)
    sut.nginx_deviation("nginx 1.22 copies the decoded $uri into proxy_redirect's replacement")
    assert_head_is_clean(r)
    assert r.status == 302
    assert r.header("Location") == "http://inj.example/pr/a%0D%0ASet-Cookie:%20evil=1/next"


def test_directory_redirect_escapes_uri(srv):
    r = get(srv, "/d" + INJECT)
    assert_head_is_clean(r)
    assert r.status == 301
    loc = r.header("Location")
    # Relative (kosoku) or made absolute (nginx), the path is percent-encoded.
    assert loc.endswith("/d%0D%0ASet-Cookie:%20evil=1/"), loc
    assert "\r" not in loc and "\n" not in loc


def wait_for_log(path: Path, needle: bytes, timeout: float = 5.0) -> bytes:
    deadline = time.monotonic() + timeout * sut.SLOWDOWN
    while True:
        data = path.read_bytes() if path.exists() else b""
        if needle in data or time.monotonic() > deadline:
            return data
        time.sleep(0.05)


LOG_LINE = re.compile(rb"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[(emerg|alert|crit|error|warn|notice|info|debug)\] ")


def test_error_log_escapes_control_bytes_from_the_url(srv):
    tag = "inj-elog"
    forged = "%0d%0a2026/01/01%2000:00:00%20[emerg]%201%230:%20forged%1b[31m%22q%5c"
    r = get(srv, f"/{tag}{forged}")
    assert r.status == 404
    sut.nginx_deviation("nginx 1.22 writes the decoded path into open()'s error-log line as it is")
    data = wait_for_log(srv.work / "error.log", tag.encode())
    assert tag.encode() in data, data[-2000:]
    # Every line of the log is a log line: the CR LF of the URL did not start one of its own.
    for line in data.split(b"\n"):
        if line:
            assert LOG_LINE.match(line), line
    assert b"\r" not in data and b"\x1b" not in data, data[-2000:]
    ours = [ln for ln in data.split(b"\n") if tag.encode() in ln]
    assert len(ours) == 1, ours
    # The client's bytes in the quoted path as nginx's access log escapes them: CTLs, '"' and '\' as \xHH.
    assert (b'/' + tag.encode() + b'\\x0D\\x0A2026/01/01 00:00:00 [emerg] 1#0: forged\\x1B[31m\\x22q\\x5C" failed (2: '
            in ours[0]), ours[0]


def test_access_log_escapes_control_bytes_from_the_url(srv):
    tag = "inj-alog"
    r = get(srv, f"/{tag}%0d%0aforged%1b%22%5c")
    assert r.status == 404
    srv_logs = {}
    for name in ("access.log", "uri.log", "uri.json.log"):
        srv_logs[name] = wait_for_log(srv.work / name, tag.encode())
    for name, data in srv_logs.items():
        assert tag.encode() in data, (name, data[-2000:])
        for line in data.split(b"\n"):
            assert b"\r" not in line and b"\x1b" not in line, (name, line)
            assert not line.startswith(b"forged"), (name, line)
    # combined: $request is the raw request line; the target's '%' sequences are kept as received.
    assert f'"GET /{tag}%0d%0aforged%1b%22%5c HTTP/1.1"'.encode() in srv_logs["access.log"]
    # escape=default on the decoded $uri: \xHH for CTLs, '"' and '\' (ngx_http_log_escape).
    assert f"/{tag}\\x0D\\x0Aforged\\x1B\\x22\\x5C|".encode() in srv_logs["uri.log"], srv_logs["uri.log"]
    # escape=json (nginx writes \\u001B, kosoku \\u001b: the same JSON string).
    assert f"/{tag}\\r\\nforged\\u001b\\\"\\\\".encode() in srv_logs["uri.json.log"].lower(), srv_logs["uri.json.log"]


def test_invalid_request_with_raw_control_bytes_is_refused_and_logged_escaped(srv):
    # Raw CTLs cannot be in a request-target (RFC 9112 §3.2): 400, and the logs stay one line per event.
    logs = {name: srv.work / name for name in ("error.log", "access.log")}
    before = {name: p.stat().st_size if p.exists() else 0 for name, p in logs.items()}
    ex = sut.exchange(srv.port, b"GET /inj-raw\x1b[2J\x7f HTTP/1.1\r\nHost: inj.example\r\n\r\n")
    assert ex.responses and ex.responses[0].status == 400, ex
    sut.nginx_deviation("nginx 1.22 writes the raw request line with its control bytes into the error log")
    time.sleep(0.3)
    for name, p in logs.items():
        data = p.read_bytes()[before[name]:] if p.exists() else b""
        assert b"\x1b" not in data and b"\x7f" not in data, (name, data[-2000:])
