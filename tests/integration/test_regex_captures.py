"""Regex captures of `location ~` / `~*` (nginx's $1..$9 and named groups, written `(?<name>...)` as PCRE or
`(?P<name>...)`): in `return`, `add_header` and every other template; empty for a group that took no part and
outside regex locations; and the canonical ngx_cache_purge location `proxy_cache_purge zone $1$is_args$args`.

Runs against nginx too (SUT=nginx), but for the purge form (nginx-light has no cache purge module).
"""
from __future__ import annotations

import pytest

import sut


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    work = tmp_path_factory.mktemp("captures")
    port = sut.free_port()
    conf = f"""
    server {{
        listen 127.0.0.1:{port};
        location ~ ^/cap/(\\w+)/(?<rest>.*)$ {{ return 200 "[$1] [$2] [$rest] [$3]\\n"; }}
        location ~ ^/py/(?P<first>[a-z]+)-(?P<Second>[0-9]+)$ {{ return 200 "[$first] [$second] [$2]\\n"; }}
        location ~* /PURGE(/.*) {{ return 200 "[$1$is_args$args]\\n"; }}
        location ~ ^/opt/(a)?b$ {{ add_header X-Group "<$1>"; return 200 "[$1]\\n"; }}
        location ~ ^/redirect/(.+)$ {{ return 301 /moved/$1; }}
        location /plain/ {{ return 200 "[$1]\\n"; }}
    }}"""
    s = sut.ServerProcess(sut.SUT, work / "server", conf, [port]).start()
    s.port = port
    yield s
    assert s.stop() == 0


@pytest.mark.parametrize("path, body", [
    ("/cap/ab/c/d", b"[ab] [c/d] [c/d] []\n"),
    ("/py/abc-42", b"[abc] [42] [42]\n"),
    ("/purge/x/y?z=1", b"[/x/y?z=1]\n"),
    ("/PuRgE/only", b"[/only]\n"),
    ("/opt/b", b"[]\n"),
    ("/opt/ab", b"[a]\n"),
    ("/plain/x", b"[]\n"),
])
def test_captures_in_templates(srv, path, body):
    resp = sut.request(srv.port, "GET", path)
    assert (resp.status, resp.body) == (200, body), resp


def test_capture_in_a_header_and_a_redirect(srv):
    resp = sut.request(srv.port, "GET", "/opt/ab")
    assert resp.header("X-Group") == "<a>"
    resp = sut.request(srv.port, "GET", "/redirect/some/where")
    assert resp.status == 301 and resp.header("Location").endswith("/moved/some/where"), resp


def test_cache_purge_location_with_a_capture_loads(tmp_path):
    """ngx_cache_purge's sample `proxy_cache_purge z $1$is_args$args` takes client data before any host: kosoku
    asks for `any_host` (a purge stays within its host); with the host first, or with any_host, it loads."""
    sut.nginx_deviation("Debian's nginx-light has no ngx_cache_purge module")
    for key, ok in (("$1$is_args$args", False), ("$host$1$is_args$args", True), ("$1$is_args$args any_host", True)):
        body = f"""    proxy_cache_path {tmp_path}/cache keys_zone=z:1m;
    server {{
        listen 127.0.0.1:{sut.free_port()};
        location ~ /purge(/.*) {{ proxy_cache_purge z {key}; }}
    }}"""
        s = sut.ServerProcess(sut.SUT, tmp_path / "srv", body, [])
        r = s.check_config()
        assert (r.returncode == 0) == ok, (key, r.stderr)
        if not ok:
            assert b'add "any_host" if that is intended' in r.stderr, r.stderr
