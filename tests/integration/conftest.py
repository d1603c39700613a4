"""Session fixtures for kosoku's end-to-end tests: the F-STATIC docroot, an extra docroot, one SUT process
serving every virtual host the tests need, and a failure report that shows the raw bytes exchanged.

Ports (all picked free at start):
  main       every name-based vhost below (static.example.com is default_server); client_header_timeout 5s
  timeout    one server with client_header_timeout 1s (C33-style tests)
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import sut


@dataclass
class Env:
    kind: str
    base: Path        # <ROOT>
    www: Path         # F-STATIC docroot
    extra: Path       # extra docroot (symlinks, 64 MiB file, extension-less file)
    port: int         # main port
    timeout_port: int  # client_header_timeout 1s
    server: sut.ServerProcess
    access_log: Path


BIG64_SIZE = 64 << 20
DEFAULT_TYPE = "application/x-itest-default"


def _big64_bytes() -> bytes:
    # Deterministic pseudo-random content, so a misplaced or repeated chunk changes the digest.
    import random

    return random.Random(64).randbytes(BIG64_SIZE)


def build_extra_root(base: Path) -> Path:
    mtime = int(time.time()) - sut.PAST_SECONDS
    extra = base / "extra"
    extra.mkdir(parents=True, exist_ok=True)
    os.chmod(extra, 0o755)
    (extra / "big64.bin").write_bytes(_big64_bytes())
    (extra / "noext").write_bytes(b"no extension\n")
    (extra / "real.txt").write_bytes(b"real file\n")
    (extra / "style.css").write_bytes(b"body{}\n")
    (extra / "app.js").write_bytes(b"var a;\n")
    (extra / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (extra / "data.json").write_bytes(b"{}\n")
    (extra / "UPPER.TXT").write_bytes(b"upper\n")
    (extra / "realdir").mkdir(exist_ok=True)
    (extra / "realdir" / "index.html").write_bytes(b"<p>realdir</p>\n")
    (base / "outside-extra.txt").write_bytes(b"linked from outside\n")
    for p in extra.rglob("*"):
        os.utime(p, (mtime, mtime))
    os.symlink("real.txt", extra / "link.txt")
    os.symlink("realdir", extra / "linkdir")
    os.symlink("../outside-extra.txt", extra / "outlink.txt")
    return extra


def http_config(www: Path, extra: Path, port: int, timeout_port: int, workdir: Path, kind: str) -> str:
    w = str(workdir)
    status_loc = "        location = /kosoku-status { status; }\n" if kind == "kosoku" else ""
    return f"""
    default_type {DEFAULT_TYPE};
    log_format itest '$remote_addr|$request_method|$request_uri|$status|$body_bytes_sent|$http_user_agent|$host';
    access_log {w}/access.log itest;
    keepalive_timeout 75s;
    large_client_header_buffers 4 8k;

    # Listed first but not default: unknown hosts must go to the default_server, not to this one.
    server {{
        listen 127.0.0.1:{port};
        server_name first.example.com;
        return 200 "first\\n";
    }}

    # F-STATIC (shared/cases/http-conformance.md §0.2)
    server {{
        listen 127.0.0.1:{port} default_server;
        server_name static.example.com;
        root {www};
        index index.html;
        client_header_timeout 5s;
        add_header Cache-Control "public, max-age=60";
        location /protected/ {{
            deny all;
        }}
        location = /protected-return {{
            deny all;
            return 200 "returned\\n";
        }}
        location = /whoami {{
            return 200 "static\\n";
        }}
{status_loc}    }}

    server {{
        listen 127.0.0.1:{port};
        server_name exact.example.com;
        return 200 "exact\\n";
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name *.wild.example.com;
        return 200 "wild-lead\\n";
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name www.wild.*;
        return 200 "wild-trail\\n";
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name .dot.example.com;
        return 200 "dot\\n";
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name ~^re\\d+\\.example\\.com$ ~^www\\.wild\\. ~^exact\\.;
        return 200 "regex\\n";
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name ~^re4\\d*\\.example\\.com$;
        return 200 "regex-second\\n";
    }}

    # Location precedence (ngx_http_core_find_location).
    server {{
        listen 127.0.0.1:{port};
        server_name prec.example.com;
        location = /exact {{ return 200 "exact\\n"; }}
        location ^~ /noregex/ {{ return 200 "noregex\\n"; }}
        location ~ \\.php$ {{ return 200 "regex-php\\n"; }}
        location ~* \\.jpg$ {{ return 200 "iregex-jpg\\n"; }}
        location ~ ^/first/ {{ return 200 "regex-first\\n"; }}
        location ~ ^/first/second/ {{ return 200 "regex-second\\n"; }}
        location /long/prefix/ {{ return 200 "long-prefix\\n"; }}
        location /long/ {{ return 200 "short-prefix\\n"; }}
        location / {{ return 200 "root\\n"; }}
    }}

    # Assorted features on top of the F-STATIC tree.
    server {{
        listen 127.0.0.1:{port};
        server_name feat.example.com;
        root {www};
        location = /text {{ return 200 "returned text\\n"; }}
        location = /go {{ return 301 http://target.example.org/landing?x=1; }}
        location = /gone {{ return 410; }}
        location /hdr/ {{
            alias {www}/;
            add_header X-A b always;
            add_header X-B c;
        }}
        location /aliased/ {{
            alias {www}/dir/;
        }}
        location /imsbefore/ {{
            alias {www}/;
            if_modified_since before;
        }}
        location /noetag/ {{
            alias {www}/;
            etag off;
        }}
        location /small/ {{
            alias {www}/;
            client_max_body_size 10;
        }}
    }}

    # try_files over the whole tree.
    server {{
        listen 127.0.0.1:{port};
        server_name tf.example.com;
        root {www};
        location / {{
            try_files $uri $uri/ =404;
        }}
        location /spa/ {{
            try_files $uri /index.html;
        }}
    }}

    # Keep-alive limits.
    server {{
        listen 127.0.0.1:{port};
        server_name ka.example.com;
        root {www};
        keepalive_requests 3;
        keepalive_timeout 1s;
    }}

    # Extra docroot: symlinks, 64 MiB file, MIME table.
    server {{
        listen 127.0.0.1:{port};
        server_name extra.example.com;
        root {extra};
    }}

    server {{
        listen 127.0.0.1:{timeout_port} default_server;
        server_name _;
        root {www};
        client_header_timeout 1s;
    }}
"""


@pytest.fixture(scope="session")
def env(tmp_path_factory) -> Env:
    base = tmp_path_factory.mktemp("root")
    os.chmod(base, 0o755)
    www = sut.build_static_root(base)
    extra = build_extra_root(base)
    workdir = base / "server"
    port, timeout_port = sut.free_ports(2)
    body = http_config(www, extra, port, timeout_port, workdir, sut.SUT)
    server = sut.ServerProcess(sut.SUT, workdir, body, [port, timeout_port])
    server.start()
    e = Env(sut.SUT, base, www, extra, port, timeout_port, server, workdir / "access.log")
    yield e
    alive_before_stop = server.alive()
    rc = server.stop()
    assert alive_before_stop, "server had already exited before the end of the session\n" + server.diagnostics()
    if sut.SUT == "kosoku":
        assert rc == 0, f"kosoku exited with {rc} after SIGTERM\n" + server.diagnostics()


@pytest.fixture(autouse=True)
def _transcript_and_liveness(request):
    """Clears the raw-bytes transcript before each test; after a test that used `env`, checks the SUT is still
    running (a crash is reported on the test that caused it)."""
    sut.TRANSCRIPT.clear()
    yield
    if "env" in request.fixturenames:
        e = request.getfixturevalue("env")
        if not e.server.alive():
            pytest.fail(f"{e.kind} died during this test (exit {e.server.proc.returncode})\n"
                        + e.server.diagnostics(), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and sut.TRANSCRIPT:
        rep.sections.append(("raw HTTP bytes (request >>> / response <<<)", sut.format_transcript()))


def pytest_report_header(config):
    return [f"SUT={sut.SUT} binary={sut.sut_bin()} workers={sut.WORKERS}"]
