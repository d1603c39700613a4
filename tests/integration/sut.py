"""Helpers for kosoku's end-to-end tests: the server under test (SUT), fixture docroots and a raw HTTP/1.1 client.

The same tests run against kosoku (default) and against Debian's nginx, chosen with the environment:

  SUT=kosoku|nginx     which server to start (default kosoku)
  KOSOKU_BIN=PATH      kosoku binary (default build/release/kosoku, relative to the repository root)
  NGINX_BIN=PATH       nginx binary (default /usr/sbin/nginx)
  SUT_WORKERS=N        worker_processes (default 2)
  SUT_SLOWDOWN=F       start-up wait multiplier (default 1; 3 when KOSOKU_SANITIZED is set)

Nothing here touches root-owned paths: every file a server writes (pid, logs, temp dirs) lives in a per-run
temp dir, and ports are picked by binding to port 0.

The raw client (Conn) keeps every byte sent and received in TRANSCRIPT so that a failing test shows the exact
request and response bytes (conftest.py prints them in the failure report).
"""
from __future__ import annotations

import email.utils
import os
import re
import signal
import socket
import socketserver
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

REPO = Path(__file__).resolve().parents[2]
SUT = os.environ.get("SUT", "kosoku")
if SUT not in ("kosoku", "nginx"):
    raise RuntimeError(f"SUT must be 'kosoku' or 'nginx', not {SUT!r}")
NGINX_BIN = os.environ.get("NGINX_BIN", "/usr/sbin/nginx")
WORKERS = int(os.environ.get("SUT_WORKERS", "2"))
# Start-up wait multiplier for slow builds (ASan/UBSan: the Makefile sets KOSOKU_SANITIZED=1).
SLOWDOWN = float(os.environ.get("SUT_SLOWDOWN", "3" if os.environ.get("KOSOKU_SANITIZED") else "1"))


def kosoku_bin() -> str:
    p = Path(os.environ.get("KOSOKU_BIN", "build/release/kosoku"))
    if not p.is_absolute():
        p = REPO / p
    return str(p)


def sut_bin(kind: str = SUT) -> str:
    return kosoku_bin() if kind == "kosoku" else NGINX_BIN


def nginx_deviation(reason: str) -> None:
    """Skip the rest of a test when the SUT is nginx, because nginx knowingly differs from the RFC/issue
    expectation that the test asserts for kosoku. `reason` names the RFC clause and nginx's behaviour."""
    import pytest

    if SUT == "nginx":
        pytest.skip("nginx deviation: " + reason)


# --------------------------------------------------------------------------------------------------------------
# Transcript of raw bytes, printed by conftest.py when a test fails.

TRANSCRIPT: list[tuple[str, bytes]] = []
_transcript_lock = threading.Lock()
_conn_ids = iter(range(1, 1 << 30))


def record(label: str, data: bytes) -> None:
    with _transcript_lock:
        TRANSCRIPT.append((label, data))


def format_transcript(limit_per_event: int = 3000, max_events: int = 60) -> str:
    out = []
    events = TRANSCRIPT[-max_events:]
    if len(TRANSCRIPT) > max_events:
        out.append(f"... {len(TRANSCRIPT) - max_events} earlier events omitted ...")
    for label, data in events:
        shown = data[:limit_per_event]
        tail = f" ... ({len(data) - limit_per_event} more bytes)" if len(data) > limit_per_event else ""
        out.append(f"{label} ({len(data)} bytes): {shown!r}{tail}")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------------------
# Ports and fixture trees.


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0 and ask the kernel)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports


# F-STATIC, exactly as in shared/cases/http-conformance.md §0.2 (URL path -> content).
STATIC_FILES: dict[str, bytes] = {
    "/index.html": b"<h1>home</h1>\n",
    "/abc.txt": b"abcdefghijklmnopqrstuvwxyz",
    "/file100.bin": bytes(range(100)),
    "/big.bin": b"A" * 1048576,
    "/protected/secret.txt": b"TOPSECRET\n",
    "/sp /a.txt": b"space-dir\n",
    "/caf\u00e9.txt": b"accent\n",
    "/dir/index.html": b"<p>dir</p>\n",
}
OUTSIDE_BODY = b"OUTSIDE-DOCROOT\n"
PAST_SECONDS = 10  # file mtimes are set this far in the past, so Last-Modified is a strong validator


def _write(path: Path, data: bytes, mtime: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


def build_static_root(base: Path) -> Path:
    """Creates <base>/www (F-STATIC) and <base>/outside.txt; returns the docroot <base>/www.
    Every file's mtime is set PAST_SECONDS in the past (os.utime), instead of sleeping 2 s."""
    mtime = int(time.time()) - PAST_SECONDS
    www = base / "www"
    for url, data in STATIC_FILES.items():
        _write(www / url.lstrip("/"), data, mtime)  # "café" is written UTF-8 (NFC as typed) by pathlib
    _write(base / "outside.txt", OUTSIDE_BODY, mtime)
    for d in [www, www / "protected", www / "sp ", www / "dir"]:
        os.chmod(d, 0o755)
    os.chmod(base, 0o755)
    return www


def etag_of(path: Path) -> str:
    """nginx's ETag for a static file: "<mtime seconds, hex>-<size, hex>" (ngx_http_set_etag)."""
    st = path.stat()
    return '"%x-%x"' % (int(st.st_mtime), st.st_size)


def http_date_of(path: Path) -> str:
    return email.utils.formatdate(int(path.stat().st_mtime), usegmt=True)


# MIME table used by every generated config (a subset of Debian's /etc/nginx/mime.types).
MIME_TYPES: dict[str, list[str]] = {
    "text/html": ["html", "htm"],
    "text/css": ["css"],
    "text/xml": ["xml"],
    "text/plain": ["txt"],
    "image/gif": ["gif"],
    "image/jpeg": ["jpeg", "jpg"],
    "image/png": ["png"],
    "image/svg+xml": ["svg", "svgz"],
    "image/x-icon": ["ico"],
    "application/javascript": ["js"],
    "application/json": ["json"],
    "application/pdf": ["pdf"],
    "application/zip": ["zip"],
    "application/x-bzip2": ["bz2"],
    "application/gzip": ["gz"],
    "font/woff": ["woff"],
    "font/woff2": ["woff2"],
    "application/octet-stream": ["bin"],
}


def types_block(indent: str = "    ") -> str:
    lines = [f"{indent}types {{"]
    for mime, exts in MIME_TYPES.items():
        lines.append(f"{indent}    {mime} {' '.join(exts)};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Configuration and process control.


def render_config(kind: str, workdir: Path, http_body: str, workers: int = WORKERS,
                  log_level: str = "info") -> str:
    """A complete nginx-syntax config: main + events + http { <http_body> }.

    nginx-only lines (pid, user, *_temp_path) are emitted only for nginx; kosoku-only ones (disk_queue, aio)
    only for kosoku. All paths are absolute and inside `workdir`."""
    w = str(workdir)
    main = [f"worker_processes {workers};", f"error_log {w}/error.log {log_level};"]
    http = []
    if kind == "nginx":
        main.append(f"pid {w}/nginx.pid;")
        if os.geteuid() == 0:
            # Workers would otherwise switch to 'nobody', which cannot enter pytest's 0700 temp dirs.
            main.append("user root;")
        for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            http.append(f"    {t}_temp_path {w}/tmp_{t};")
    else:
        main.append("disk_queue itest depth=32 max_queue=4096;")
        http.append("    aio io_uring=itest;")
    return "\n".join(
        main
        + ["events {", "    worker_connections 1024;", "}", "http {"]
        + http
        + [types_block(), http_body, "}", ""]
    )


class ServerProcess:
    """One running server (kosoku or nginx) with its own workdir, config and ports."""

    def __init__(self, kind: str, workdir: Path, http_body: str, ports: Iterable[int], **render_kw):
        self.kind = kind
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o755)
        self.ports = list(ports)
        self.conf_path = self.workdir / f"{kind}.conf"
        self.conf_text = render_config(kind, self.workdir, http_body, **render_kw)
        self.conf_path.write_text(self.conf_text)
        self.stdout_path = self.workdir / "stdout.log"
        self.stderr_path = self.workdir / "stderr.log"
        self.proc: Optional[subprocess.Popen] = None

    def argv(self, test_only: bool = False) -> list[str]:
        if self.kind == "nginx":
            a = [NGINX_BIN, "-p", str(self.workdir) + "/", "-c", str(self.conf_path), "-g", "daemon off;"]
            if test_only:
                a.insert(1, "-t")
            return a
        return [kosoku_bin()] + (["-t"] if test_only else []) + ["-c", str(self.conf_path)]

    def check_config(self) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(test_only=True), cwd=self.workdir, capture_output=True, timeout=30)

    def config_check_output(self) -> tuple[int, str]:
        """`-t` on the configuration: its exit status and what it printed (stderr, then stdout)."""
        res = self.check_config()
        return res.returncode, (res.stderr + res.stdout).decode(errors="replace")

    def line_of(self, text: str) -> int:
        """The number (1-based) of the first line of the configuration that contains `text`."""
        return next(i for i, line in enumerate(self.conf_text.splitlines(), 1) if text in line)

    def start(self, wait_s: float = 15.0) -> "ServerProcess":
        binary = self.argv()[0]
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"{self.kind} binary not found or not executable: {binary} "
                               f"(build it, set KOSOKU_BIN, or run with SUT=nginx)")
        self.proc = subprocess.Popen(self.argv(), cwd=self.workdir, stdin=subprocess.DEVNULL,
                                     stdout=open(self.stdout_path, "wb"), stderr=open(self.stderr_path, "wb"))
        wait_s *= SLOWDOWN
        deadline = time.monotonic() + wait_s
        pending = set(self.ports)
        while pending:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode} during start-up\n"
                                   + self.diagnostics())
            for p in list(pending):
                try:
                    socket.create_connection(("127.0.0.1", p), timeout=0.2).close()
                    pending.discard(p)
                except OSError:
                    pass
            if pending and time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.kind} did not accept on ports {sorted(pending)} within {wait_s}s\n"
                                   + self.diagnostics())
            if pending:
                time.sleep(0.05)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait, return the exit status (SIGKILL and raise if it does not exit in time)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise RuntimeError(f"{self.kind} did not exit within {timeout}s of SIGTERM\n" + self.diagnostics())
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def error_log(self) -> str:
        p = self.workdir / "error.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def diagnostics(self, tail: int = 4000) -> str:
        parts = [f"argv: {self.argv()}", f"config {self.conf_path}:\n{self.conf_text}"]
        for name, p in (("stderr", self.stderr_path), ("error.log", self.workdir / "error.log")):
            if p.exists():
                parts.append(f"{name} (tail):\n{p.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)


# --------------------------------------------------------------------------------------------------------------
# HTTP/1.1 response parsing (RFC 9112 §6: message body length).


class ParseError(Exception):
    pass


@dataclass
class Response:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    raw_head: bytes
    chunked: bool = False
    trailers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def interim(self) -> bool:
        return 100 <= self.status < 200

    def header(self, name: str) -> Optional[str]:
        """The field value (several lines of the same name are joined with ", "); None if absent."""
        vals = self.header_list(name)
        return ", ".join(vals) if vals else None

    def header_list(self, name: str) -> list[str]:
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def has(self, name: str) -> bool:
        return bool(self.header_list(name))

    def tokens(self, name: str) -> list[str]:
        return [t.strip().lower() for v in self.header_list(name) for t in v.split(",") if t.strip()]

    def __repr__(self) -> str:
        b = self.body if len(self.body) <= 200 else self.body[:200] + b"..."
        return f"<Response {self.status} {self.headers} body[{len(self.body)}]={b!r}>"


_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def _parse_head(buf: bytes):
    """Returns (status_line parts, headers, head_len) or None if the head is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > 1 << 20:
            raise ParseError("response head longer than 1 MiB")
        return None
    head = buf[:end]
    lines = head.split(b"\r\n")
    m = re.match(rb"^(HTTP/\d\.\d) (\d{3}) ?(.*)$", lines[0])
    if not m:
        raise ParseError(f"bad status line {lines[0][:200]!r}")
    headers = []
    for line in lines[1:]:
        if b":" not in line:
            raise ParseError(f"bad header line {line[:200]!r}")
        k, v = line.split(b":", 1)
        if not _TOKEN.match(k):
            raise ParseError(f"bad header name {k[:200]!r}")
        headers.append((k.decode("latin-1"), v.strip(b" \t").decode("latin-1")))
    return (m.group(1).decode(), int(m.group(2)), m.group(3).decode("latin-1")), headers, end + 4


def _parse_chunked(buf: bytes, pos: int):
    """Decodes a chunked body starting at pos. Returns (body, trailers, end_pos) or None if incomplete."""
    body = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size_s = buf[pos:eol].split(b";", 1)[0].strip()
        if not re.fullmatch(rb"[0-9A-Fa-f]+", size_s):
            raise ParseError(f"bad chunk size line {buf[pos:eol][:100]!r}")
        size = int(size_s, 16)
        pos = eol + 2
        if size == 0:
            trailers = []
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    return None
                line = buf[pos:eol]
                pos = eol + 2
                if line == b"":
                    return bytes(body), trailers, pos
                k, _, v = line.partition(b":")
                trailers.append((k.decode("latin-1"), v.strip().decode("latin-1")))
        if len(buf) < pos + size + 2:
            return None
        body += buf[pos:pos + size]
        if buf[pos + size:pos + size + 2] != b"\r\n":
            raise ParseError("chunk data not followed by CRLF")
        pos += size + 2


def parse_response(buf: bytes, method: str = "GET", eof: bool = False):
    """Parses one response at the start of buf. Returns (Response, consumed) or None if more bytes are needed.
    A close-delimited body is complete only when eof is True. Raises ParseError on malformed framing."""
    h = _parse_head(buf)
    if h is None:
        return None
    (version, status, reason), headers, pos = h
    resp = Response(version, status, reason, headers, b"", buf[:pos])
    te = resp.tokens("transfer-encoding")
    cls = resp.header_list("content-length")
    if method == "HEAD" or 100 <= status < 200 or status in (204, 304):
        return resp, pos
    if te:
        if te[-1] != "chunked":
            raise ParseError(f"response with Transfer-Encoding {te} (not chunked-final)")
        r = _parse_chunked(buf, pos)
        if r is None:
            return None
        resp.body, resp.trailers, end = r
        resp.chunked = True
        return resp, end
    if cls:
        vals = {v.strip() for v in ",".join(cls).split(",")}
        if len(vals) != 1 or not next(iter(vals)).isdigit():
            raise ParseError(f"bad Content-Length {cls}")
        n = int(next(iter(vals)))
        if len(buf) < pos + n:
            return None
        resp.body = buf[pos:pos + n]
        return resp, pos + n
    if not eof:
        return None
    resp.body = buf[pos:]
    return resp, len(buf)


def parse_responses(buf: bytes, methods: Optional[list[str]] = None, eof: bool = True):
    """Parses every complete response in buf. 1xx responses are returned too but do not consume a method.
    Returns (responses, leftover bytes)."""
    out: list[Response] = []
    finals = 0
    while buf:
        m = methods[finals] if methods and finals < len(methods) else "GET"
        r = parse_response(buf, m, eof)
        if r is None:
            break
        resp, n = r
        out.append(resp)
        if not resp.interim:
            finals += 1
        buf = buf[n:]
    return out, buf


# --------------------------------------------------------------------------------------------------------------
# Raw client.


class Conn:
    """A raw TCP connection to a SUT port. Sends exact bytes, reads and parses responses incrementally.

    `closed` becomes True once the peer closed (EOF) or reset the connection (`reset` is then True too)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 5.0, record_io: bool = True):
        self.id = next(_conn_ids)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.closed = False
        self.reset = False
        self.send_error: Optional[str] = None
        self.record_io = record_io
        self.raw = bytearray()  # every byte received on this connection, parsed or not

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes) -> bool:
        """Sends all bytes; returns False (and notes why) if the peer already closed or reset."""
        if self.record_io:
            record(f"conn#{self.id} >>> sent", data)
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError) as e:
            self.send_error = repr(e)
            if self.record_io:
                record(f"conn#{self.id} !!! send failed", repr(e).encode())
            return False

    def _recv_some(self, deadline: float) -> bool:
        """Reads once. Returns False when nothing more can arrive before the deadline (timeout or close)."""
        if self.closed:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(1 << 20)
        except socket.timeout:
            return False
        except ConnectionResetError:
            self.closed = self.reset = True
            if self.record_io:
                record(f"conn#{self.id} <<< RESET", b"")
            return False
        if not data:
            self.closed = True
            if self.record_io:
                record(f"conn#{self.id} <<< EOF", b"")
            return False
        self.raw += data
        if self.record_io:
            record(f"conn#{self.id} <<< received", data)
        self.buf += data
        return True

    def read_responses(self, n: int, methods: Optional[list[str]] = None, timeout: float = 5.0) -> list[Response]:
        """Reads until n final (non-1xx) responses are complete, the peer closes, or the timeout passes.
        Returns every response parsed (1xx included); unparsed bytes stay in self.buf."""
        deadline = time.monotonic() + timeout
        out: list[Response] = []
        finals = 0
        while True:
            while self.buf and finals < n:
                m = methods[finals] if methods and finals < len(methods) else "GET"
                r = parse_response(self.buf, m, eof=self.closed)
                if r is None:
                    break
                resp, used = r
                self.buf = self.buf[used:]
                out.append(resp)
                if not resp.interim:
                    finals += 1
            if finals >= n or self.closed:
                return out
            if not self._recv_some(deadline) and not self.closed:
                return out  # timeout

    def read_response(self, method: str = "GET", timeout: float = 5.0) -> Optional[Response]:
        """The next final response (1xx responses are skipped, see read_responses to see them)."""
        rs = [r for r in self.read_responses(1, [method], timeout) if not r.interim]
        return rs[0] if rs else None

    def read_until_close(self, timeout: float = 5.0) -> bytes:
        """Reads until the peer closes or the timeout passes; returns (and consumes) everything buffered."""
        deadline = time.monotonic() + timeout
        while self._recv_some(deadline):
            pass
        data, self.buf = self.buf, b""
        return data

    def wait_closed(self, timeout: float) -> bool:
        """True if the peer closes (or resets) within timeout; received bytes are kept in self.buf."""
        deadline = time.monotonic() + timeout
        while self._recv_some(deadline):
            pass
        return self.closed


@dataclass
class Exchange:
    """Everything one connection produced: the parsed responses, bytes left over, and how it ended."""
    request: bytes
    responses: list[Response]
    leftover: bytes
    closed: bool
    reset: bool
    elapsed: float

    @property
    def finals(self) -> list[Response]:
        return [r for r in self.responses if not r.interim]

    def one(self) -> Response:
        """Exactly one final response and nothing else."""
        assert len(self.finals) == 1, f"expected exactly one response, got {len(self.finals)}: {self.responses}"
        assert self.leftover == b"", f"stray bytes after the response: {self.leftover[:300]!r}"
        return self.finals[0]


def exchange(port: int, data: bytes, methods: Optional[list[str]] = None, timeout: float = 5.0,
             expect: Optional[int] = None, grace: float = 0.3) -> Exchange:
    """Sends data on a new connection and collects responses.

    Without `expect`, reads until the server closes (or `timeout`). With `expect=N`, reads until N final
    responses arrived, then waits `grace` seconds more for stray bytes or a close."""
    t0 = time.monotonic()
    with Conn(port, timeout=timeout) as c:
        c.send(data)
        if expect is None:
            raw = c.read_until_close(timeout)
        else:
            c.read_responses(expect, methods, timeout)  # only to wait; re-parsed below from the full stream
            c.wait_closed(grace)
            raw = bytes(c.raw)
        responses, leftover = parse_responses(raw, methods, eof=c.closed)
        return Exchange(data, responses, leftover, c.closed, c.reset, time.monotonic() - t0)


def build_request(method: str, target: str | bytes, host: Optional[str] = "static.example.com",
                  headers: Iterable[tuple[str, str]] = (), body: bytes = b"", close: bool = True,
                  version: str = "HTTP/1.1") -> bytes:
    t = target if isinstance(target, bytes) else target.encode("latin-1")
    lines = [method.encode() + b" " + t + b" " + version.encode()]
    if host is not None:
        lines.append(b"Host: " + host.encode("latin-1"))
    for k, v in headers:
        lines.append(k.encode("latin-1") + b": " + v.encode("latin-1"))
    if body and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in headers):
        lines.append(b"Content-Length: %d" % len(body))
    if close:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def request(port: int, method: str, target: str | bytes, host: Optional[str] = "static.example.com",
            headers: Iterable[tuple[str, str]] = (), body: bytes = b"", timeout: float = 5.0) -> Response:
    """One request with `Connection: close`; asserts exactly one final response and no stray bytes."""
    ex = exchange(port, build_request(method, target, host, headers, body), [method], timeout)
    return ex.one()


# --------------------------------------------------------------------------------------------------------------
# multipart/byteranges (RFC 9110 §14.6).


@dataclass
class Part:
    headers: dict[str, str]
    first: int
    last: int
    complete_length: Optional[int]
    data: bytes


_CR_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def parse_content_range(value: str) -> tuple[int, int, Optional[int]]:
    m = _CR_RE.match(value.strip())
    assert m, f"bad Content-Range {value!r}"
    return int(m.group(1)), int(m.group(2)), None if m.group(3) == "*" else int(m.group(3))


def parse_byteranges(resp: Response) -> list[Part]:
    """Splits a multipart/byteranges body into parts, slicing each by its Content-Range length and checking
    that every part is followed by exactly CRLF + the next delimiter (so no byte goes unchecked)."""
    ctype = resp.header("content-type") or ""
    m = re.match(r'^multipart/byteranges;\s*boundary=("?)([^";]+)\1\s*$', ctype, re.I)
    assert m, f"not multipart/byteranges: {ctype!r}"
    delim = b"--" + m.group(2).encode()
    body = resp.body
    pos = body.find(delim)
    assert pos >= 0, "no boundary delimiter in the body"
    assert body[:pos].strip(b"\r\n") == b"", f"unexpected preamble {body[:pos]!r}"
    parts: list[Part] = []
    while True:
        pos += len(delim)
        if body[pos:pos + 2] == b"--":
            assert body[pos + 2:].strip(b"\r\n") == b"", f"unexpected epilogue {body[pos + 2:]!r}"
            return parts
        assert body[pos:pos + 2] == b"\r\n", f"delimiter not followed by CRLF at {pos}: {body[pos:pos + 20]!r}"
        pos += 2
        hdrs: dict[str, str] = {}
        while True:
            eol = body.index(b"\r\n", pos)
            line = body[pos:eol]
            pos = eol + 2
            if line == b"":
                break
            k, _, v = line.partition(b":")
            hdrs[k.decode().strip().lower()] = v.decode().strip()
        assert "content-range" in hdrs, f"part without Content-Range: {hdrs}"
        first, last, total = parse_content_range(hdrs["content-range"])
        n = last - first + 1
        data = body[pos:pos + n]
        assert len(data) == n, "part shorter than its Content-Range"
        pos += n
        assert body[pos:pos + 2 + len(delim)] == b"\r\n" + delim, \
            f"part data not followed by CRLF+delimiter: {body[pos:pos + 40]!r}"
        pos += 2
        parts.append(Part(hdrs, first, last, total, data))


class ScriptedOrigin:
    """An origin on 127.0.0.1 (a free port) that runs `serve(sock)` for each connection in a thread of its own;
    a subclass writes serve(). close() stops accepting and closes the listening socket."""

    def __init__(self):
        origin = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                origin.serve(self.request)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, c: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class AnsweringOrigin(ScriptedOrigin):
    """An origin that answers one request per connection with `answer(request_head)` (the whole response's
    bytes) and closes; a client that goes away early is not an error."""

    def __init__(self, answer):
        self.answer = answer
        super().__init__()

    def serve(self, c: socket.socket) -> None:
        try:
            head = recv_request_head(c)
            if head is not None:
                c.sendall(self.answer(head))
        except OSError:
            pass
        finally:
            c.close()


def next_request_head(c: socket.socket, buf: bytes) -> Optional[tuple[bytes, bytes]]:
    """The next request head on a keep-alive connection: reads from `c` onto `buf` (what is left of earlier
    reads) until it holds CRLF CRLF; returns (the head without its CRLF CRLF, the bytes after it), or None if the
    peer closes first."""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def recv_request_head(c: socket.socket) -> Optional[bytes]:
    """Reads from `c` until the bytes hold a request head (CRLF CRLF); None if the peer closes first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None
        buf += d
    return buf
