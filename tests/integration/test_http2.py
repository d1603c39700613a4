"""HTTP/2 (RFC 9113) as nginx's ngx_http_v2_module serves it: `listen ... http2` over TLS (ALPN "h2", RFC 9113
§3.2) and cleartext with prior knowledge ("h2c", §3.3); static files, HEAD, conditionals, ranges, 404 and the
reverse proxy and its cache over HTTP/2; the http2_* directives, keepalive_requests / keepalive_timeout on HTTP/2
connections; the $http2 and $server_protocol variables; real clients (curl, nghttp, h2load, openssl s_client, the
python h2 library) and a raw-frame client (h2_harness.H2Raw) where the frames themselves are the point; graceful
shutdown (GOAWAY NO_ERROR, §6.8) with a download in flight.

One module-scoped server (one worker) with a port per scenario:
  tls    `listen ... ssl http2`        ALPN h2, http/1.1
  tls1   `listen ... ssl`              no http2: ALPN http/1.1 only
  h2c    `listen ... http2`            cleartext, prior knowledge
  conc   `http2_max_concurrent_streams 8`
  ka     `keepalive_requests 5; keepalive_timeout 1s`
  chunk  `http2_chunk_size 4k; http2_body_preread_size 32k`
and a python origin (test_proxy.Origin) behind /proxy/, /small/ and /cached/. Two tests start servers of their
own: graceful shutdown (it stops its server) and `http2 on;` (kosoku only).

Runs against nginx 1.22 too (SUT=nginx), except (sut.nginx_deviation):
  * test_http11_on_a_cleartext_http2_port: nginx 1.22's `listen ... http2` without ssl takes every connection for
    HTTP/2 and answers an HTTP/1.1 request with a GOAWAY (PROTOCOL_ERROR); kosoku serves it as HTTP/1.1 (what
    nginx ≥ 1.25.1 does with `http2 on;`);
  * test_response_fields_are_lower_case_without_connection_specific_fields: nginx 1.22 passes an origin's
    Proxy-Connection, Upgrade, Trailer and the fields its Connection header names into HTTP/2 responses
    (RFC 9113 §8.2.2);
  * test_http2_on_directive: nginx 1.22 does not know `http2 on;` (1.25.1): its `-t` failure is checked, then
    skipped.
nginx's graceful shutdown is SIGQUIT (its SIGTERM is the fast one); kosoku's is SIGTERM.
"""
from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

import h2_harness as H
import sut
from h2_harness import (END_STREAM, GOAWAY, HEADERS, INITIAL_WINDOW_SIZE, MAX_CONCURRENT_STREAMS, NO_ERROR,
                        PROTOCOL_ERROR, REFUSED_STREAM, H2Lib, H2Raw, err_name)
from test_proxy import Origin

ABC = b"abcdefghijklmnopqrstuvwxyz"
VARS = "http2=$http2 protocol=$server_protocol scheme=$scheme"
LOG_FORMAT = "'$request|$status|$http2|$server_protocol|$body_bytes_sent'"


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# ---------------------------------------------------------------------------------------------- the server


class Env:
    def __init__(self, site: H.Site, origin: Origin):
        self.site, self.origin, self.www, self.ca = site, origin, site.www, site.ca_cert
        names = ["tls", "tls1", "h2c", "conc", "ka", "chunk"]
        self.port = dict(zip(names, sut.free_ports(len(names))))
        p, w, o = self.port, site.www, origin.port
        self.access_log = site.dir / "access-h2.log"
        body = f"""
    log_format h2log {LOG_FORMAT};
    access_log {self.access_log} h2log;
    http2_recv_buffer_size 256k;
    proxy_cache_path {site.dir}/cache levels=1:2 keys_zone=h2cache:1m;
    client_max_body_size 16m;
    keepalive_timeout 30s;

    server {{
        listen 127.0.0.1:{p['tls']} ssl http2;
        listen 127.0.0.1:{p['tls1']} ssl;
        listen 127.0.0.1:{p['h2c']} http2;
        server_name a.test;
        {site.ssl_lines()}
        root {w};
        # nginx >= 1.19.7 takes keepalive_timeout for idle HTTP/2 connections and only warns about this one.
        http2_idle_timeout 30s;
        http2_max_concurrent_streams 128;
        http2_chunk_size 8k;
        http2_body_preread_size 64k;
        keepalive_requests 1000;
        location = /vars {{ return 200 "{VARS}\\n"; }}
        location = /vars-hdr {{
            add_header X-Http2 "[$http2]" always;
            add_header X-Protocol $server_protocol always;
            return 204;
        }}
        # HTTP/1.1 upstream: a body without Content-Length (DATA until END_STREAM) goes on chunked.
        location /proxy/ {{ proxy_pass http://127.0.0.1:{o}; proxy_http_version 1.1; }}
        location /small/ {{ proxy_pass http://127.0.0.1:{o}; proxy_http_version 1.1; client_max_body_size 100k; }}
        location /cached/ {{
            proxy_pass http://127.0.0.1:{o};
            proxy_cache h2cache;
            proxy_cache_valid 200 1m;
            add_header X-Cache $upstream_cache_status always;
        }}
    }}
    server {{
        listen 127.0.0.1:{p['conc']} http2;
        root {w};
        http2_max_concurrent_streams 8;
    }}
    server {{
        listen 127.0.0.1:{p['ka']} http2;
        root {w};
        keepalive_requests 5;
        keepalive_timeout 1s;
    }}
    server {{
        listen 127.0.0.1:{p['chunk']} http2;
        root {w};
        http2_chunk_size 4k;
        http2_body_preread_size 32k;
    }}
"""
        self.server = sut.ServerProcess(sut.SUT, site.dir / "server-h2", body, list(p.values()), workers=1)

    def tls(self, **kw) -> H2Raw:
        return H2Raw(self.port["tls"], tls_ca=self.ca, **kw)

    def h2c(self, port: str = "h2c", **kw) -> H2Raw:
        return H2Raw(self.port[port], **kw)

    def raw(self, transport: str, **kw) -> H2Raw:
        return (self.tls(**kw) if transport == "tls" else self.h2c(**kw)).handshake()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> H.Site:
    d = tmp_path_factory.mktemp("h2")
    os.chmod(d, 0o755)
    return H.Site(d)


@pytest.fixture(scope="module")
def h2(site):
    origin = Origin("o1")
    e = Env(site, origin)
    e.server.start()
    yield e
    try:
        H.stop_server(e.server)
    finally:
        origin.stop()


@pytest.fixture(autouse=True)
def _alive(request):
    yield
    H.fail_if_died(request, "h2")


TRANSPORTS = ["tls", "h2c"]


# ---------------------------------------------------------------------------------------------- clients


def curl(h2: Env, transport: str, path: str, *extra: str, out: Path | None = None,
         port: int | None = None) -> tuple[int, str, subprocess.CompletedProcess]:
    """curl over HTTP/2: --http2 over TLS (ALPN) or --http2-prior-knowledge in cleartext.
    Returns (status, curl's %{http_version}, the process)."""
    cmd = ["curl", "-sS", "--max-time", "60", "-w", "\\n%{http_code} %{http_version}"]
    if transport == "tls":
        port = port or h2.port["tls"]
        cmd += ["--http2", "--cacert", str(h2.ca), "--resolve", f"a.test:{port}:127.0.0.1"]
        url = f"https://a.test:{port}{path}"
    else:
        port = port or h2.port["h2c"]
        cmd += ["--http2-prior-knowledge"]
        url = f"http://127.0.0.1:{port}{path}"
    if out:
        cmd += ["-o", str(out)]
    p = subprocess.run(cmd + list(extra) + [url], capture_output=True, timeout=90)
    sut.record(f"curl {' '.join(cmd[5:] + list(extra))} {url} rc={p.returncode}",
               p.stdout[-1500:] + b"\n--- stderr\n" + p.stderr[-1500:])
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    code, version = p.stdout.rsplit(b"\n", 1)[1].decode().split()
    return int(code), version, p


def curl_body(p: subprocess.CompletedProcess) -> bytes:
    return p.stdout.rsplit(b"\n", 1)[0]


def s_client_alpn(h2: Env, port: int, alpn: str) -> str:
    """The protocol `openssl s_client -alpn` reports the server selected ("No ALPN negotiated" -> "")."""
    p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "a.test",
                        "-CAfile", str(h2.ca), "-alpn", alpn], input=b"", capture_output=True, timeout=20)
    out = p.stdout.decode(errors="replace")
    sut.record(f"s_client -alpn {alpn} port {port} rc={p.returncode}", out[-3000:].encode())
    assert "Verify return code: 0 (ok)" in out, out[-2000:]
    m = re.search(r"^ALPN protocol: (\S+)", out, re.M)
    if m:
        return m.group(1)
    assert "No ALPN negotiated" in out, out[-2000:]
    return ""


def http11_over_tls(h2: Env, port: int, request: bytes, alpn: list[str] | None) -> tuple[sut.Response, str | None]:
    if alpn is None:   # no ALPN extension at all
        ctx = ssl.create_default_context(cafile=str(h2.ca))
        ctx.check_hostname = False
    else:
        ctx = H.client_ssl_context(h2.ca, alpn)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="a.test") as t:
            t.sendall(request)
            buf = b""
            while True:
                d = t.recv(65536)
                if not d:
                    break
                buf += d
            sut.record(f"TLS http/1.1 port {port} alpn={t.selected_alpn_protocol()}", buf)
            rs, _ = sut.parse_responses(buf, ["GET"])
            assert len(rs) == 1, buf[:500]
            return rs[0], t.selected_alpn_protocol()


def assert_h2_fields(fields: list[tuple[str, str]]) -> None:
    """RFC 9113 §8.2: field names are lower case; §8.2.2: no connection-specific fields; §8.3: the pseudo-header
    fields come first and a response has only :status."""
    names = [k for k, _ in fields]
    assert names and names[0] == ":status", fields
    assert [n for n in names if n.startswith(":")] == [":status"], fields
    for n in names:
        assert n == n.lower(), f"upper case in field name {n!r}: {fields}"
        assert n not in H.CONNECTION_SPECIFIC, f"connection-specific field {n!r} in an HTTP/2 response: {fields}"
    te = [v for k, v in fields if k == "te"]
    assert te in ([], ["trailers"]), fields


# ---------------------------------------------------------------------------------------------- negotiation


def test_curl_http2_over_tls_byte_exact(h2, tmp_path):
    out = tmp_path / "r1m"
    code, version, _ = curl(h2, "tls", "/rand1m.bin", out=out)
    assert (code, version) == (200, "2")
    assert sha(out.read_bytes()) == sha(h2.site.files["/rand1m.bin"])
    code, version, p = curl(h2, "tls", "/abc.txt")
    assert (code, version, curl_body(p)) == (200, "2", ABC)


def test_curl_http2_prior_knowledge_cleartext_byte_exact(h2, tmp_path):
    out = tmp_path / "r1m"
    code, version, _ = curl(h2, "h2c", "/rand1m.bin", out=out)
    assert (code, version) == (200, "2")
    assert sha(out.read_bytes()) == sha(h2.site.files["/rand1m.bin"])
    code, version, p = curl(h2, "h2c", "/vars")
    assert (code, version, curl_body(p)) == (200, "2", b"http2=h2c protocol=HTTP/2.0 scheme=http\n")


def test_alpn_selects_h2_on_an_http2_port_and_http11_elsewhere(h2):
    # RFC 9113 §3.2 / RFC 7301: the server picks h2 from "h2,http/1.1" when HTTP/2 is enabled on the port.
    assert s_client_alpn(h2, h2.port["tls"], "h2,http/1.1") == "h2"
    assert s_client_alpn(h2, h2.port["tls"], "http/1.1") == "http/1.1"
    assert s_client_alpn(h2, h2.port["tls1"], "h2,http/1.1") == "http/1.1"
    code, version, _ = curl(h2, "tls", "/abc.txt", port=h2.port["tls1"])   # curl falls back to HTTP/1.1
    assert (code, version) == (200, "1.1")


def test_http11_over_tls_on_an_http2_port(h2):
    """A TLS client that offers only http/1.1 (or no ALPN at all) is served HTTP/1.1 on an http2 port."""
    req = sut.build_request("GET", "/vars", "a.test")
    for alpn in (["http/1.1"], None):
        r, selected = http11_over_tls(h2, h2.port["tls"], req, alpn)
        assert selected == ("http/1.1" if alpn else None)
        assert (r.version, r.status, r.body) == ("HTTP/1.1", 200, b"http2= protocol=HTTP/1.1 scheme=https\n"), r


def test_http11_on_a_cleartext_http2_port(h2):
    ex = sut.exchange(h2.port["h2c"], sut.build_request("GET", "/abc.txt", "a.test"), ["GET"], timeout=5)
    if sut.SUT == "nginx":
        # nginx 1.22 reads the request line as a bad connection preface: SETTINGS, then GOAWAY PROTOCOL_ERROR.
        assert ex.responses == [] and ex.closed, ex.responses
        assert H.frame(GOAWAY, 0, 0, b"\0\0\0\0\0\0\0\x01") in ex.leftover, ex.leftover[:300]
    sut.nginx_deviation("nginx 1.22's cleartext `listen ... http2` speaks only HTTP/2 (prior knowledge); an "
                        "HTTP/1.1 request gets a GOAWAY (nginx >= 1.25.1 `http2 on;` serves both)")
    r = ex.one()
    assert (r.version, r.status, r.body) == ("HTTP/1.1", 200, ABC), r


def test_server_settings_and_the_stream_limit(h2):
    """SETTINGS_MAX_CONCURRENT_STREAMS is http2_max_concurrent_streams (default 128); SETTINGS_INITIAL_WINDOW_SIZE
    is http2_body_preread_size (nginx's ngx_http_v2_send_settings). Streams past the limit are refused: RFC 9113
    §5.1.2 says PROTOCOL_ERROR or REFUSED_STREAM (REFUSED_STREAM tells the client it may retry)."""
    c = h2.raw("tls")
    assert c.server_settings.get(MAX_CONCURRENT_STREAMS) == 128, c.server_settings
    assert c.server_settings.get(INITIAL_WINDOW_SIZE) == 65536, c.server_settings
    c.close()
    # A window of 0 keeps every response open (headers sent, DATA held back), so the streams stay active.
    c = h2.h2c("conc").handshake({INITIAL_WINDOW_SIZE: 0})
    assert c.server_settings.get(MAX_CONCURRENT_STREAMS) == 8, c.server_settings
    sids = [c.request("/rand1m.bin") for _ in range(8)]
    c.wait(lambda f: all(c.stream(s).status or c.stream(s).reset is not None for s in sids), timeout=5)
    assert [c.stream(s).status for s in sids] == [200] * 8, [c.stream(s) for s in sids]
    assert all(c.stream(s).body == b"" for s in sids)
    # A ninth stream exceeds the limit the client has acknowledged: a stream error REFUSED_STREAM or
    # PROTOCOL_ERROR (nginx), or the connection error PROTOCOL_ERROR libnghttp2 answers (kosoku) — RFC 9113
    # §5.4.1 lets an endpoint end the connection for any error.
    c2 = h2.h2c("conc").handshake({INITIAL_WINDOW_SIZE: 0})
    more = [c2.request("/rand1m.bin") for _ in range(10)]
    c2.wait(lambda f: c2.goaway is not None or all(c2.stream(s).status or c2.stream(s).reset is not None
                                                   for s in more), timeout=5)
    if c2.goaway is not None:
        assert c2.goaway.error_code == PROTOCOL_ERROR, c2.goaway.summary()
    else:
        assert [c2.stream(s).reset for s in more[8:]] in ([REFUSED_STREAM] * 2, [PROTOCOL_ERROR] * 2), \
            [err_name(c2.stream(s).reset) for s in more[8:]]
    c2.close()
    assert not c.closed and c.goaway is None
    # Once one stream ends (its window opened) a new one is accepted again.
    c.send_raw(H.window_update_frame(sids[0], 1 << 20) + H.window_update_frame(0, 1 << 24))
    st = c.response(sids[0], timeout=10)
    assert st.ended and sha(st.body) == sha(h2.site.files["/rand1m.bin"])
    c.send_raw(H.settings_frame({INITIAL_WINDOW_SIZE: 65535}))   # new streams get a window again (§6.9.2)
    r = c.get("/abc.txt")
    assert (r.status, bytes(r.body)) == (200, ABC)
    c.close()


def test_http2_chunk_size_and_body_preread_size(h2):
    c = h2.h2c("chunk").handshake()
    assert c.server_settings.get(INITIAL_WINDOW_SIZE) == 32768, c.server_settings
    r = c.get("/rand1m.bin")
    assert r.status == 200 and sha(r.body) == sha(h2.site.files["/rand1m.bin"])
    assert max(r.data_frames) <= 4096, f"http2_chunk_size 4k: DATA frames up to {max(r.data_frames)} bytes"
    c = h2.raw("h2c")
    r = c.get("/rand1m.bin")
    assert max(r.data_frames) <= 8192, f"http2_chunk_size 8k: DATA frames up to {max(r.data_frames)} bytes"


def test_keepalive_requests_ends_the_connection_with_goaway(h2):
    """keepalive_requests N (nginx >= 1.19.7 on HTTP/2): after N streams, GOAWAY NO_ERROR with the last stream's
    id; streams opened after it are not processed (RFC 9113 §6.8)."""
    c = h2.h2c("ka").handshake()
    for i in range(5):
        r = c.get("/abc.txt")
        assert (r.sid, r.status, bytes(r.body)) == (2 * i + 1, 200, ABC), r
    g = c.wait_goaway(3)
    assert g is not None, "no GOAWAY after keepalive_requests streams"
    assert (g.error_code, g.last_sid) == (NO_ERROR, 9), g.summary()
    late = c.request("/abc.txt")
    c.wait_closed(3)
    assert c.stream(late).status is None, "a stream above GOAWAY's last-stream-id was processed"
    assert c.closed


def test_keepalive_timeout_closes_an_idle_http2_connection(h2):
    c = h2.h2c("ka").handshake()
    assert c.get("/abc.txt").status == 200
    t0 = time.monotonic()
    assert c.wait_closed(5), "idle HTTP/2 connection still open 5 s after keepalive_timeout 1s"
    secs = time.monotonic() - t0
    assert 0.8 <= secs <= 3.0, f"closed after {secs:.2f}s (keepalive_timeout 1s)"
    assert c.goaway is not None and c.goaway.error_code == NO_ERROR, c.goaway and c.goaway.summary()


# ---------------------------------------------------------------------------------------------- static files


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_static_get_head_404(h2, transport):
    c = h2.raw(transport)
    r = c.get("/abc.txt")
    assert (r.status, bytes(r.body)) == (200, ABC)
    assert r.header("content-length") == "26" and r.header("content-type") == "text/plain"
    assert r.header("etag") == sut.etag_of(h2.www / "abc.txt")
    assert r.header("last-modified") == sut.http_date_of(h2.www / "abc.txt")
    h = c.get("/abc.txt", method="HEAD")
    assert (h.status, bytes(h.body), h.header("content-length")) == (200, b"", "26")
    head_frame = next(f for f in c.frames if f.type == HEADERS and f.sid == h.sid)
    assert head_frame.flags & END_STREAM and not h.data_frames, "HEAD: the HEADERS frame ends the stream"
    n = c.get("/no/such/file")
    assert n.status == 404 and b"404 Not Found" in n.body
    assert n.header("content-length") == str(len(n.body))
    for i in range(3):  # one connection, many requests
        f = c.get(f"/many/f{20 + i}.bin")
        assert f.status == 200 and sha(f.body) == sha(h2.site.files[f"/many/f{20 + i}.bin"])
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_conditional_requests_304(h2, transport):
    c = h2.raw(transport)
    etag, lm = sut.etag_of(h2.www / "abc.txt"), sut.http_date_of(h2.www / "abc.txt")
    for hdr in ([("if-none-match", etag)], [("if-modified-since", lm)]):
        r = c.get("/abc.txt", extra=hdr)
        assert (r.status, bytes(r.body)) == (304, b""), (hdr, r)
        assert r.header("etag") == etag and r.header("content-length") is None
    r = c.get("/abc.txt", extra=[("if-none-match", '"other"')])
    assert (r.status, bytes(r.body)) == (200, ABC)
    c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_range_requests(h2, transport):
    c = h2.raw(transport)
    r = c.get("/abc.txt", extra=[("range", "bytes=2-5")])
    assert (r.status, bytes(r.body), r.header("content-range")) == (206, b"cdef", "bytes 2-5/26"), r
    assert r.header("content-length") == "4"
    r = c.get("/abc.txt", extra=[("range", "bytes=-3")])
    assert (r.status, bytes(r.body), r.header("content-range")) == (206, b"xyz", "bytes 23-25/26"), r
    data = h2.site.files["/rand1m.bin"]
    r = c.get("/rand1m.bin", extra=[("range", "bytes=500000-700000")])
    assert r.status == 206 and sha(r.body) == sha(data[500000:700001])
    r = c.get("/abc.txt", extra=[("range", "bytes=1-2,5-6")])
    assert r.status == 206
    resp = sut.Response("HTTP/2", 206, "", [(k, v) for k, v in r.headers if not k.startswith(":")], bytes(r.body),
                        b"")
    assert [(p.first, p.last, p.data) for p in sut.parse_byteranges(resp)] == [(1, 2, b"bc"), (5, 6, b"fg")]
    r = c.get("/abc.txt", extra=[("range", "bytes=100-200")])
    assert (r.status, r.header("content-range")) == (416, "bytes */26"), r
    c.close()


def test_response_fields_are_lower_case_without_connection_specific_fields(h2):
    """Static, error, proxied and cached answers, decoded frame by frame (RFC 9113 §8.2: lower-case names; §8.2.2:
    no connection-specific fields), also through an independent client that refuses such fields itself (python h2
    raises ProtocolError); then an origin that sends Connection: X-Secret, keep-alive / Keep-Alive /
    Proxy-Connection / Upgrade / Trailer, and one that answers Transfer-Encoding: chunked."""
    c = h2.raw("tls")
    for path in ["/abc.txt", "/nope", "/vars", "/proxy/x/chunked", f"/cached/{random.random()}/c"]:
        r = c.get(path)
        assert r.status in (200, 404), (path, r)
        assert_h2_fields(r.headers)
        if path.endswith("/chunked"):
            assert bytes(r.body) == b"hello world!"
    with H2Lib(h2.port["tls"], tls_ca=h2.ca) as lc:
        for path in ["/abc.txt", "/proxy/y/chunked"]:
            assert lc.get(path).status == 200, path
    r = c.get("/proxy/x/hop")
    assert (r.status, bytes(r.body), r.header("x-kept")) == (200, b"hop body", "yes"), r
    assert r.header("connection") is None and r.header("keep-alive") is None
    sut.nginx_deviation("nginx 1.22 passes the origin's Proxy-Connection, Upgrade, Trailer and the fields named in "
                        "its Connection header into HTTP/2 responses (RFC 9113 §8.2.2 MUST NOT generate them, "
                        "RFC 9110 §7.6.1)")
    assert_h2_fields(r.headers)
    assert r.header("x-secret") is None and r.header("trailer") is None, r.headers
    with H2Lib(h2.port["tls"], tls_ca=h2.ca) as lc:
        assert lc.get("/proxy/y/hop").status == 200


# ---------------------------------------------------------------------------------------------- proxy and cache


def test_proxy_get_and_a_1mib_upload(h2, tmp_path):
    import json

    body = random.Random(5).randbytes(1 << 20)
    f = tmp_path / "up.bin"
    f.write_bytes(body)
    code, version, p = curl(h2, "tls", "/proxy/up/echo", "--data-binary", f"@{f}",
                            "-H", "Content-Type: application/octet-stream")
    assert (code, version) == (200, "2")
    e = json.loads(curl_body(p))
    assert (e["method"], e["target"], e["body_len"], e["body_sha"]) == ("POST", "/proxy/up/echo", 1 << 20, sha(body))
    # Without Content-Length, in DATA frames as the server's flow-control window allows (python h2 client).
    with H2Lib(h2.port["h2c"]) as lc:
        st = lc.get("/proxy/up2/echo", method="POST", body=body)
        assert st.status == 200, st
        e = json.loads(bytes(st.body))
        assert (e["body_len"], e["body_sha"]) == (1 << 20, sha(body)), e
        st = lc.get("/proxy/g/echo?x=1")
        e = json.loads(bytes(st.body))
        assert (e["method"], e["target"], e["body_len"]) == ("GET", "/proxy/g/echo?x=1", 0)
        hosts = [v for k, v in e["headers"] if k.lower() == "host"]
        assert hosts == [f"127.0.0.1:{h2.origin.port}"], e["headers"]


def test_client_max_body_size_413(h2, tmp_path):
    f = tmp_path / "big.bin"
    f.write_bytes(b"x" * 200_000)
    code, version, _ = curl(h2, "tls", "/small/echo", "--data-binary", f"@{f}")
    assert (code, version) == (413, "2")
    n = h2.origin.hits("echo")
    with H2Lib(h2.port["h2c"]) as lc:   # no Content-Length: the limit is found while the DATA arrives
        st = lc.get("/small/echo", method="POST", body=b"y" * 200_000)
        assert st.status == 413, st
    assert h2.origin.hits("echo") == n, "a body over client_max_body_size reached the origin"


def test_proxy_cache_hit_over_http2(h2):
    path = f"/cached/{random.randrange(1 << 30)}/item"
    c = h2.raw("tls")
    r1 = c.get(path)
    r2 = c.get(path)
    assert (r1.status, r1.header("x-cache")) == (200, "MISS"), r1
    assert (r2.status, r2.header("x-cache"), bytes(r2.body)) == (200, "HIT", bytes(r1.body)), r2
    assert h2.origin.hits("item") >= 1
    n = h2.origin.hits("item")
    assert c.get(path).header("x-cache") == "HIT" and h2.origin.hits("item") == n


# ---------------------------------------------------------------------------------------------- tools


def test_nghttp_verbose(h2):
    for url in (f"https://127.0.0.1:{h2.port['tls']}/abc.txt", f"http://127.0.0.1:{h2.port['h2c']}/abc.txt"):
        p = subprocess.run(["nghttp", "-v", "-n", url], capture_output=True, timeout=30)
        out = p.stdout.decode(errors="replace")
        sut.record(f"nghttp -v {url} rc={p.returncode}", out[-3000:].encode())
        assert p.returncode == 0, out + p.stderr.decode(errors="replace")
        assert re.search(r"recv SETTINGS frame <length=\d+, flags=0x00, stream_id=0>", out), out
        assert "(niv=" in out and "[SETTINGS_MAX_CONCURRENT_STREAMS(0x03):128]" in out, out
        assert re.search(r"recv SETTINGS frame <length=0, flags=0x01, stream_id=0>", out), out  # our SETTINGS acked
        m = re.search(r"recv \(stream_id=(\d+)\) :status: 200", out)   # 13 after nghttp's priority anchors
        assert m, out
        sid = m.group(1)
        assert re.search(rf"recv \(stream_id={sid}\) content-length: 26", out), out
        assert re.search(rf"recv DATA frame <length=26, flags=0x01, stream_id={sid}>", out), out


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_h2load_all_requests_succeed(h2, transport):
    url = (f"https://127.0.0.1:{h2.port['tls']}/abc.txt" if transport == "tls"
           else f"http://127.0.0.1:{h2.port['h2c']}/abc.txt")
    p = subprocess.run(["h2load", "-n", "2000", "-c", "10", "-m", "10", url], capture_output=True, timeout=60)
    out = p.stdout.decode(errors="replace")
    sut.record(f"h2load {url} rc={p.returncode}", out[-3000:].encode())
    assert p.returncode == 0, out + p.stderr.decode(errors="replace")
    if transport == "tls":
        assert "Application protocol: h2" in out, out
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", out)
    assert m, out
    assert m.groups() == ("2000", "2000", "2000", "2000", "0", "0", "0"), out
    assert re.search(r"status codes: 2000 2xx, 0 3xx, 0 4xx, 0 5xx", out), out


# ---------------------------------------------------------------------------------------------- streams


def test_100_concurrent_streams_one_stalled(h2):
    """100 streams on one connection (python h2 client), each a different file; stream 1's window is never given
    back (RFC 9113 §5.2: flow control is per stream): it gets at most its initial window (65535 bytes) and the
    other 99 complete byte-exact meanwhile; opening its window then completes it too."""
    files = h2.site.files
    with H2Lib(h2.port["tls"], tls_ca=h2.ca) as lc:
        lc.run(lambda: lc.remote_settings_seen, 5)
        stalled_path = "/rand1m.bin"
        sids = {}
        first = lc.request(stalled_path)
        lc.stalled.add(first)
        sids[first] = stalled_path
        for i in range(99):
            p = f"/many/f{i}.bin"
            sids[lc.request(p)] = p
        others = [s for s in sids if s != first]
        assert lc.run(lambda: all(lc.streams[s].done for s in others), timeout=30), \
            [s for s in others if not lc.streams[s].done]
        for s in others:
            st = lc.streams[s]
            assert st.status == 200 and st.ended and st.reset is None, (sids[s], st)
            assert sha(st.body) == sha(files[sids[s]]), sids[s]
            assert st.header("content-length") == str(len(files[sids[s]]))
        stalled = lc.streams[first]
        assert not stalled.done and len(stalled.body) <= 65535, (len(stalled.body), stalled.done)
        assert not lc.closed and lc.goaway is None
        lc.stalled.discard(first)
        lc.conn.increment_flow_control_window(4 << 20, stream_id=first)
        lc.flush()
        assert lc.run(lambda: stalled.done, timeout=20)
        assert stalled.ended and sha(stalled.body) == sha(files[stalled_path])


def test_a_64mib_file_byte_exact(h2, tmp_path):
    out = tmp_path / "r64"
    code, version, _ = curl(h2, "tls", "/rand64m.bin", out=out)
    assert (code, version) == (200, "2")
    data = out.read_bytes()
    assert len(data) == 64 << 20 and sha(data) == sha(h2.site.files["/rand64m.bin"])
    c = h2.raw("h2c", record_frames=False)   # 8 MiB through the raw client, flow-controlled by its updates
    r = c.get("/rand8m.bin", timeout=30)
    assert r.ended and sha(r.body) == sha(h2.site.files["/rand8m.bin"])


# ---------------------------------------------------------------------------------------------- variables


def test_http2_and_server_protocol_variables(h2):
    c = h2.raw("tls")
    assert bytes(c.get("/vars").body) == b"http2=h2 protocol=HTTP/2.0 scheme=https\n"
    r = c.get("/vars-hdr")
    assert (r.status, r.header("x-http2"), r.header("x-protocol")) == (204, "[h2]", "HTTP/2.0"), r
    c.close()
    c = h2.raw("h2c")
    assert bytes(c.get("/vars").body) == b"http2=h2c protocol=HTTP/2.0 scheme=http\n"
    marker = f"/abc.txt?log={random.randrange(1 << 30)}"
    assert c.get(marker).status == 200
    c.close()
    r, _ = http11_over_tls(h2, h2.port["tls1"], sut.build_request("GET", "/vars", "a.test"), ["http/1.1"])
    assert r.body == b"http2= protocol=HTTP/1.1 scheme=https\n"
    deadline = time.monotonic() + 3
    line = None
    while time.monotonic() < deadline and line is None:
        text = h2.access_log.read_text() if h2.access_log.exists() else ""
        line = next((ln for ln in text.splitlines() if marker in ln), None)
        if line is None:
            time.sleep(0.05)
    assert line == f"GET {marker} HTTP/2.0|200|h2c|HTTP/2.0|26", line


# ---------------------------------------------------------------------------------------------- own servers


def graceful_signal() -> signal.Signals:
    return signal.SIGQUIT if sut.SUT == "nginx" else signal.SIGTERM


def test_graceful_shutdown_sends_goaway_and_finishes_the_stream(site):
    """Shutdown (kosoku SIGTERM, nginx SIGQUIT): GOAWAY NO_ERROR whose last-stream-id covers the stream in flight
    (RFC 9113 §6.8), which still completes byte-exact; then the connection closes and the server exits."""
    port = sut.free_port()
    body = f"""
    server {{
        listen 127.0.0.1:{port} ssl http2;
        server_name a.test;
        {site.ssl_lines()}
        root {site.www};
    }}"""
    srv = sut.ServerProcess(sut.SUT, site.dir / "server-graceful", body, [port], workers=1)
    srv.start()
    try:
        c = H2Raw(port, tls_ca=site.ca_cert).handshake()
        sid = c.request("/rand8m.bin")
        c.stalled.add(sid)   # keep the download in flight: its window stays at 65535 until after the signal
        c.wait(lambda f: sum(c.stream(sid).data_frames) >= 65535, timeout=5)
        assert c.stream(sid).status == 200 and not c.stream(sid).done
        srv.proc.send_signal(graceful_signal())
        g = c.wait_goaway(3)
        assert g is not None, "no GOAWAY after the shutdown signal"
        assert g.error_code == NO_ERROR and g.last_sid >= sid, g.summary()
        c.stalled.discard(sid)
        c.send_raw(H.window_update_frame(sid, 16 << 20))
        st = c.response(sid, timeout=20)
        assert st.ended and st.reset is None, st
        assert sha(st.body) == sha(site.files["/rand8m.bin"])
        assert c.wait_closed(5), "the connection stayed open after its last stream ended"
        c.close()
        rc = srv.proc.wait(15)
        if sut.SUT == "kosoku":
            assert rc == 0, srv.diagnostics()
    finally:
        srv.kill()


def test_http2_on_directive(site):
    """`http2 on;` (nginx >= 1.25.1): HTTP/2 on the server's listen sockets: ALPN h2 on TLS, prior knowledge and
    HTTP/1.1 side by side in cleartext."""
    tls_port, plain_port = sut.free_ports(2)
    body = f"""
    server {{
        listen 127.0.0.1:{tls_port} ssl;
        listen 127.0.0.1:{plain_port};
        http2 on;
        server_name a.test;
        {site.ssl_lines()}
        root {site.www};
        location = /vars {{ return 200 "{VARS}\\n"; }}
    }}"""
    srv = sut.ServerProcess(sut.SUT, site.dir / "server-http2-on", body, [tls_port, plain_port], workers=1)
    if sut.SUT == "nginx":
        rc, out = srv.config_check_output()
        assert rc != 0 and 'unknown directive "http2"' in out, out
        pytest.skip("nginx 1.22 has no `http2 on;` (nginx >= 1.25.1); its -t refusal is checked above")
    srv.start()
    try:
        c = H2Raw(tls_port, tls_ca=site.ca_cert).handshake()
        assert c.alpn == "h2"
        assert bytes(c.get("/vars").body) == b"http2=h2 protocol=HTTP/2.0 scheme=https\n"
        c = H2Raw(plain_port).handshake()
        assert bytes(c.get("/vars").body) == b"http2=h2c protocol=HTTP/2.0 scheme=http\n"
        r = sut.request(plain_port, "GET", "/vars", host="a.test")
        assert (r.version, r.body) == ("HTTP/1.1", b"http2= protocol=HTTP/1.1 scheme=http\n"), r
        H.stop_server(srv)
    finally:
        srv.kill()
