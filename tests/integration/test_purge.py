"""Purge scope end to end (core/cache/purge_key.hh, core/http/parser.hh split_host): several server blocks share
one keys zone, their keys told apart by the host (`proxy_cache_key $scheme:$host$request_uri`), and a purge from
one of them must never remove another's entries unless the configuration says `any_host`:

- a Host field or absolute-form authority that is no host (`*`, SP, `/`, `?`, `#`, `@`, control bytes, an empty
  port...) is a 400 before any purge sees it (`Host: *` once made `PURGE /p/k1` a wildcard over every host);
- `PURGE /uri` is an exact purge of the request's own key; a `*` in the URI is an ordinary byte unless the
  location says `proxy_cache_purge PURGE wildcard`, and then the wildcard stays within the request's host;
- the `$arg_key` form (`proxy_cache_purge ZONE "$scheme:$host$arg_key"`) refuses a key that continues the host
  (`?key=x/k` would be a key of a.examplex) and its wildcard `?key=*` removes a.example's keys but not those of
  a.examplex or a.example.evil; `any_host` lifts the bound; `kosoku -t` refuses a KEY without a host.

Whether an entry is still cached is told by the origin's request count for (Host, path), not by a header of
the product under test. The origin is test_cache.py's. kosoku only (nginx has no proxy_cache_purge).
"""
from __future__ import annotations

import pytest

import sut
from test_cache import Origin, Reply, prefix

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's proxy_cache_purge")

HOSTS = ["a.example", "b.example", "a.examplex", "a.example.evil"]


def vhosts_config(port: int, origin_port: int, w) -> str:
    blocks = []
    for i, h in enumerate(HOSTS):
        blocks.append(f"""
    server {{
        listen 127.0.0.1:{port}{" default_server" if i == 0 else ""};
        server_name {h};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_cache shared;
        proxy_cache_key $scheme:$host$request_uri;
        proxy_cache_valid 200 60s;
        location / {{
            proxy_pass http://origin;
            proxy_cache_purge PURGE from 127.0.0.1;
        }}
        location /w/ {{
            proxy_pass http://origin;
            proxy_cache_purge PURGE wildcard from 127.0.0.1;
        }}
        location /purge/ {{
            allow 127.0.0.1;
            deny all;
            proxy_cache_purge shared "$scheme:$host$arg_key";
        }}
        location /purge-w/ {{
            allow 127.0.0.1;
            deny all;
            proxy_cache_purge shared "$scheme:$host$arg_key" wildcard;
        }}
        location /purge-any/ {{
            allow 127.0.0.1;
            deny all;
            proxy_cache_purge shared "$arg_key" any_host;
        }}
    }}""")
    return f"""
    proxy_cache_path {w}/cache levels=1:2 keys_zone=shared:10m inactive=10m use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 8; }}
{"".join(blocks)}
"""


class Vhosts:
    def __init__(self, origin: Origin, server: sut.ServerProcess, port: int):
        self.origin, self.server, self.port = origin, server, port

    def route(self, path: str) -> None:
        self.origin.route(path, lambda req, n: Reply(200, [("Content-Type", "text/plain"),
                                                          ("Cache-Control", "max-age=60")],
                                                     f"{req.header('Host')} {req.path} #{n}".encode()))

    def hits(self, host: str, path: str) -> int:
        with self.origin.lock:
            return sum(1 for r in self.origin.log[path] if r.header("Host") == host)

    def get(self, host: str, target: str, method: str = "GET") -> sut.Response:
        return sut.request(self.port, method, target, host=host)

    def fill(self, paths: list[str]) -> None:
        """Every host caches every path (one origin request each)."""
        for p in paths:
            self.route(p)
            for h in HOSTS:
                assert self.get(h, p).status == 200
                assert self.get(h, p).status == 200
                assert self.hits(h, p) == 1, (h, p)

    def cached(self, host: str, path: str) -> bool:
        """A GET answered without the origin: the entry was still there (a miss caches it again)."""
        before = self.hits(host, path)
        r = self.get(host, path)
        assert r.status == 200 and r.body.startswith(f"{host} {path} ".encode()), r
        return self.hits(host, path) == before

    def cached_map(self, paths: list[str]) -> dict[tuple[str, str], bool]:
        return {(h, p): self.cached(h, p) for p in paths for h in HOSTS}


@pytest.fixture(scope="module")
def vh(tmp_path_factory):
    origin = Origin()
    workdir = tmp_path_factory.mktemp("purge-vhosts")
    port = sut.free_port()
    server = sut.ServerProcess(sut.SUT, workdir, vhosts_config(port, origin.port, workdir), [port]).start()
    yield Vhosts(origin, server, port)
    alive = server.alive()
    rc = server.stop()
    origin.stop()
    assert alive, "kosoku died during the purge tests\n" + server.diagnostics()
    assert rc == 0, f"kosoku exited with {rc}\n" + server.diagnostics()


BAD_HOSTS = [b"*", b"*.example", b"a.example*", b"a b", b"a/b", b"a?b", b"a#b", b"u@a.example", b"a.example:",
             b":80", b"a:65536", b"a.example:8x", b"[::1]:", b"[::1", b"[v1.x]", b"a%2eexample", b"a!b", b"a\x01b",
             b"a\x7fb", b"caf\xc3\xa9.example", b"a..example", b"."]


@pytest.mark.parametrize("host", BAD_HOSTS, ids=lambda h: repr(h)[2:-1])
def test_invalid_host_field_is_400(vh, host):
    for method in ("PURGE", "GET"):
        ex = sut.exchange(vh.port, method.encode() + b" /p/k1 HTTP/1.1\r\nHost: " + host + b"\r\n\r\n", [method])
        r = ex.one()
        assert r.status == 400, (host, r)
        assert ex.closed  # the engine closes after a request it could not parse


@pytest.mark.parametrize("target", [b"http://*/p/k1", b"http://*.example/p/k1", b"http://a.example*/p/k1",
                                    b"http://a.example:/p/k1", b"http://a%2eexample/p", b"http://[::1]:/p",
                                    b"http://a.example:99999/p", b"https://[v1.x]/p"],
                         ids=lambda t: t.decode())
def test_invalid_absolute_form_authority_is_400(vh, target):
    ex = sut.exchange(vh.port, b"PURGE " + target + b" HTTP/1.1\r\nHost: a.example\r\n\r\n", ["PURGE"])
    assert ex.one().status == 400
    assert ex.closed


def test_legitimate_hosts_still_select_their_server(vh):
    p = prefix() + "/legit"
    vh.route(p)
    # Case-insensitive, trailing dot stripped (nginx): the same server, the same cache key, one origin request.
    for h in ("a.example", "A.EXAMPLE.", "a.Example:8080", f"127.0.0.1:{vh.port}", "[::1]:8080"):
        r = vh.get(h, p)
        assert r.status == 200, (h, r)
    assert vh.hits("a.example", p) == 1  # A.EXAMPLE. and a.Example:8080 are a.example's cached entry
    assert vh.hits("127.0.0.1", p) == 1 and vh.hits("[::1]", p) == 1  # the default server, keyed by their host
    r = sut.request(vh.port, "GET", f"http://B.Example.:8080{p}".encode(), host="a.example")
    assert r.status == 200 and r.body.startswith(f"b.example {p} ".encode())  # the authority wins (RFC 9112 §3.2.2)


def test_host_star_purge_is_refused_and_removes_nothing(vh):
    p = prefix()
    paths = [f"{p}/ok/k1", f"{p}/ok/k2"]
    vh.fill(paths)
    for req in (b"PURGE " + paths[0].encode() + b" HTTP/1.1\r\nHost: *\r\n\r\n",
                b"PURGE " + p.encode() + b"/* HTTP/1.1\r\nHost: *\r\n\r\n",
                b"PURGE http://*" + paths[0].encode() + b" HTTP/1.1\r\nHost: a.example\r\n\r\n"):
        assert sut.exchange(vh.port, req, ["PURGE"]).one().status == 400
    assert all(vh.cached_map(paths).values())


def test_method_purge_is_exact_without_wildcard(vh):
    p = prefix()
    paths = [f"{p}/k1", f"{p}/k2"]
    vh.fill(paths)
    r = vh.get("a.example", f"{p}/*", method="PURGE")
    assert r.status == 404  # the key "http:a.example<p>/*" only: nothing is cached under it
    assert all(vh.cached_map(paths).values())
    r = vh.get("a.example", f"{p}/k1", method="PURGE")
    assert r.status == 200 and b"Entries: 1" in r.body
    state = vh.cached_map(paths)
    assert state.pop(("a.example", f"{p}/k1")) is False
    assert all(state.values()), state  # k1 of the three other hosts, and k2 everywhere
    # A URI with a literal "*" is an entry like any other, purged exactly.
    star = f"{p}/lit*"
    vh.route(star)
    assert vh.get("a.example", star).status == 200
    assert vh.get("a.example", star, method="PURGE").status == 200
    assert not vh.cached("a.example", star)
    assert all(vh.cached_map(paths[1:]).values())


def test_wildcard_purge_stays_within_its_host(vh):
    p = "/w" + prefix()
    paths = [f"{p}/x/1", f"{p}/x/2", f"{p}/y"]
    vh.fill(paths)
    # Only a trailing "*" is a wildcard (nginx plus): "/x/*/1" is the key of that URI, which is not cached.
    assert vh.get("a.example", f"{p}/*/1", method="PURGE").status == 404
    assert all(vh.cached_map(paths).values())
    r = vh.get("a.example", f"{p}/x/*", method="PURGE")
    assert r.status == 200 and b"Entries: 2" in r.body
    state = vh.cached_map(paths)
    assert [k for k, v in state.items() if not v] == [("a.example", f"{p}/x/1"), ("a.example", f"{p}/x/2")]
    r = vh.get("a.examplex", f"{p}/*", method="PURGE")
    assert r.status == 200 and b"Entries: 3" in r.body
    state = vh.cached_map(paths)
    assert sorted(k for k, v in state.items() if not v) == sorted(("a.examplex", q) for q in paths)


def test_arg_key_purge_cannot_reach_other_hosts(vh):
    p = prefix()
    paths = [f"{p}/k"]
    vh.fill(paths)
    # Without `wildcard` the "*" is part of the key "http:a.example*": no entry has it.
    assert vh.get("a.example", "/purge/?key=*").status == 404
    # Keys that continue the host name another host's key: refused, whatever follows.
    for key in (f"x{p}/k", f".evil{p}/k", f"x*", ".evil*"):
        assert vh.get("a.example", f"/purge/?key={key}").status == 403, key
        assert vh.get("a.example", f"/purge-w/?key={key}").status == 403, key
    assert all(vh.cached_map(paths).values())
    assert "purge of \"http:a.examplex" in vh.server.error_log()  # the refusal is logged with the key
    # The wildcard form purges the request's own host only: not a.examplex, not a.example.evil.
    r = vh.get("a.example", "/purge-w/?key=*")
    assert r.status == 200, r
    state = vh.cached_map(paths)
    assert state == {(h, paths[0]): h != "a.example" for h in HOSTS}
    # Exact keys of the own host work in both forms.
    assert vh.get("b.example", f"/purge/?key={p}/k").status == 200
    assert not vh.cached("b.example", f"{p}/k")
    # `any_host` is the configuration saying a purge may name any key.
    r = vh.get("a.example", f"/purge-any/?key=http:a.example.evil{p}/k")
    assert r.status == 200 and b"Entries: 1" in r.body
    state = vh.cached_map(paths)
    assert state == {(h, paths[0]): h != "a.example.evil" for h in HOSTS}


def test_configuration_refuses_purge_key_without_host(tmp_path):
    origin_port = sut.free_port()
    for bad, where in (('location /purge/ { proxy_cache_purge shared "$arg_key"; }', '"$arg_key"'),
                       ("location / { proxy_pass http://127.0.0.1:1; proxy_cache shared; "
                        "proxy_cache_key $request_uri; proxy_cache_purge PURGE wildcard; }", "proxy_cache_purge PURGE")):
        body = f"""
    proxy_cache_path {tmp_path}/cache keys_zone=shared:1m;
    server {{
        listen 127.0.0.1:{origin_port};
        {bad}
    }}
"""
        s = sut.ServerProcess(sut.SUT, tmp_path, body, [origin_port])
        r = s.check_config()
        out = (r.stdout + r.stderr).decode()
        assert r.returncode == 1, out
        line_no = next(i for i, ln in enumerate(s.conf_text.split("\n"), 1) if bad in ln)
        col = s.conf_text.split("\n")[line_no - 1].index(where) + 1
        assert f"{s.conf_path}:{line_no}:{col}: " in out, out
        assert "could name another host's keys" in out and '"any_host"' in out, out
        # The same configuration with any_host is accepted.
        ok = bad.replace('"$arg_key";', '"$arg_key" any_host;').replace("wildcard;", "wildcard any_host;")
        s = sut.ServerProcess(sut.SUT, tmp_path, body.replace(bad, ok), [origin_port])
        r = s.check_config()
        assert r.returncode == 0, (r.stdout + r.stderr).decode()
