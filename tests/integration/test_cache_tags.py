"""Cache tags and soft purge (core/cache/tags.hh, tag_index.hh, purge.hh): an origin tags its responses with
Surrogate-Key (Fastly), Cache-Tag (Cloudflare) or xkey (Varnish); `PURGE` with `Surrogate-Key: t1 t2` removes
every entry carrying one of the tags, within the purging request's host; `Fastly-Soft-Purge: 1` marks the
selected entries stale instead of removing them; a JSON body (`{"tags":[...],"hosts":[...],"prefixes":[...]}`,
purge_doc.hh) purges by tag, by virtual host and by key prefix. The tag fields are not forwarded to clients unless
proxy_pass_header names them; the tag index is rebuilt from the files after a restart.

Whether an entry is still cached is told by the origin's request count for (Host, path), not by a header of the
product under test. kosoku only (nginx has neither tags nor proxy_cache_purge).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import sut
from cache_harness import Origin, OriginRequest, Reply, prefix

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's cache tags")

HOSTS = ["a.example", "b.example"]


def tags_config(port: int, origin_port: int, w: Path) -> str:
    blocks = []
    for i, h in enumerate(HOSTS):
        blocks.append(f"""
    server {{
        listen 127.0.0.1:{port}{" default_server" if i == 0 else ""};
        server_name {h};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_buffer_size 64k;
        proxy_buffers 4 64k;
        proxy_busy_buffers_size 128k;
        proxy_cache tagged;
        proxy_cache_key $scheme:$host$request_uri;
        proxy_cache_valid 200 60s;
        location / {{
            proxy_pass http://origin;
            proxy_cache_purge PURGE from 127.0.0.1;
        }}
        location /passed/ {{
            proxy_pass http://origin;
            proxy_pass_header Surrogate-Key;
            proxy_cache_purge PURGE from 127.0.0.1;
        }}
        location /ct-only/ {{
            proxy_pass http://origin;
            proxy_cache_tags_header Cache-Tag;
            proxy_cache_purge PURGE from 127.0.0.1;
        }}
        location /stale/ {{
            proxy_pass http://origin;
            proxy_cache_use_stale updating;
            proxy_cache_background_update on;
            proxy_cache_purge PURGE from 127.0.0.1;
        }}
        location /reval/ {{
            proxy_pass http://origin;
            proxy_cache_revalidate on;
            proxy_cache_purge PURGE from 127.0.0.1;
        }}
        location /purge-tags {{
            allow 127.0.0.1;
            deny all;
            proxy_cache_purge tagged "$scheme:$host$arg_key";
        }}
        location = /purge-api {{
            allow 127.0.0.1;
            deny all;
            proxy_cache_purge tagged "$scheme:$host$arg_key" any_host;
        }}
        location = /kosoku-status {{ status; }}
    }}""")
    return f"""
    proxy_cache_path {w}/cache levels=1:2 keys_zone=tagged:10m inactive=10m use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 8; }}
{"".join(blocks)}
"""


class Tagged:
    def __init__(self, origin: Origin, workdir: Path, port: int):
        self.origin, self.workdir, self.port = origin, workdir, port
        self.server = sut.ServerProcess(sut.SUT, workdir, tags_config(port, origin.port, workdir), [port]).start()

    def route(self, path: str, tag_fields: list[tuple[str, str]], extra=()) -> None:
        def reply(req: OriginRequest, n: int) -> Reply:
            return Reply(200, [("Content-Type", "text/plain"), ("Cache-Control", "max-age=60"), *tag_fields, *extra],
                         f"{req.header('Host')} {req.path} #{n}".encode())
        self.origin.route(path, reply)

    def hits(self, host: str, path: str) -> int:
        with self.origin.lock:
            return sum(1 for r in self.origin.log[path] if r.header("Host") == host)

    def get(self, host: str, target: str, method: str = "GET", headers=(), body: bytes = b"") -> sut.Response:
        return sut.request(self.port, method, target, host=host, headers=headers, body=body)

    def fill(self, host: str, path: str) -> sut.Response:
        first = self.get(host, path)
        assert first.status == 200, first
        assert self.get(host, path).status == 200
        assert self.hits(host, path) == 1, (host, path)
        return first

    def cached(self, host: str, path: str) -> bool:
        before = self.hits(host, path)
        r = self.get(host, path)
        assert r.status == 200, r
        return self.hits(host, path) == before

    def purge_tags(self, host: str, tags: str, path: str = "/", soft: bool = False) -> sut.Response:
        headers = [("Surrogate-Key", tags)] + ([("Fastly-Soft-Purge", "1")] if soft else [])
        return self.get(host, path, method="PURGE", headers=headers)

    def metric(self, name: str, **labels) -> float:
        doc = json.loads(self.get(HOSTS[0], "/kosoku-status?format=json").body)
        return sum(m["value"] for m in doc["extra"]["proxy_cache"]
                   if m["name"] == name and all(m["labels"].get(k) == v for k, v in labels.items()))


@pytest.fixture(scope="module")
def tg(tmp_path_factory):
    origin = Origin()
    workdir = tmp_path_factory.mktemp("cache-tags")
    t = Tagged(origin, workdir, sut.free_port())
    yield t
    alive = t.server.alive()
    rc = t.server.stop()
    origin.stop()
    assert alive, "kosoku died during the tag tests\n" + t.server.diagnostics()
    assert rc == 0, f"kosoku exited with {rc}\n" + t.server.diagnostics()


def entries(r: sut.Response) -> int:
    for line in r.body.decode().splitlines():
        if line.startswith("Entries: "):
            return int(line.split()[1])
    raise AssertionError(r.body)


@pytest.mark.parametrize("field,value", [
    ("Surrogate-Key", "{t} other-{t}"),
    ("Cache-Tag", "other-{t},{t}"),
    ("xkey", "{t}"),
])
def test_tag_purge_removes_the_entries_tagged_in_each_header_form(tg, field, value):
    t = "art" + prefix()[1:]
    p1, p2, p3 = "/f1" + prefix(), "/f2" + prefix(), "/f3" + prefix()
    tg.route(p1, [(field, value.format(t=t))])
    tg.route(p2, [(field, value.format(t=t))])
    tg.route(p3, [(field, "unrelated")])
    for p in (p1, p2, p3):
        tg.fill("a.example", p)
    r = tg.purge_tags("a.example", t)
    assert r.status == 200 and entries(r) == 2, r
    assert not tg.cached("a.example", p1) and not tg.cached("a.example", p2)
    assert tg.cached("a.example", p3)
    assert tg.purge_tags("a.example", "no-such-tag" + prefix()[1:]).status == 404


def test_tag_fields_are_not_forwarded_unless_proxy_pass_header_says_so(tg):
    t = "hide" + prefix()[1:]
    p = "/hide" + prefix()
    tg.route(p, [("Surrogate-Key", t), ("Cache-Tag", t), ("xkey", t)])
    for r in (tg.get("a.example", p), tg.get("a.example", p)):  # the miss and the hit
        assert r.status == 200
        assert r.header("Surrogate-Key") is None and r.header("Cache-Tag") is None and r.header("xkey") is None
    q = "/passed/" + prefix()
    tg.route(q, [("Surrogate-Key", t)])
    for r in (tg.get("a.example", q), tg.get("a.example", q)):
        assert r.header("Surrogate-Key") == t


def test_proxy_cache_tags_header_reads_only_the_forms_it_names(tg):
    t = "ct" + prefix()[1:]
    p, q = "/ct-only/sk" + prefix(), "/ct-only/ct" + prefix()
    tg.route(p, [("Surrogate-Key", t)])
    tg.route(q, [("Cache-Tag", t)])
    tg.fill("a.example", p)
    tg.fill("a.example", q)
    # Surrogate-Key is not read there, so it is not hidden either (it is an ordinary field of the response).
    assert tg.get("a.example", p).header("Surrogate-Key") == t
    r = tg.purge_tags("a.example", t)
    assert r.status == 200 and entries(r) == 1
    assert tg.cached("a.example", p) and not tg.cached("a.example", q)


def test_tag_purge_removes_every_vary_variant_carrying_the_tag(tg):
    t = "vary" + prefix()[1:]
    p = "/vary" + prefix()
    tg.route(p, [("Surrogate-Key", t), ("Vary", "Accept-Language")])
    for lang in ("en", "fr"):
        assert tg.get("a.example", p, headers=[("Accept-Language", lang)]).status == 200
        assert tg.get("a.example", p, headers=[("Accept-Language", lang)]).status == 200
    assert tg.hits("a.example", p) == 2
    r = tg.purge_tags("a.example", t)
    assert r.status == 200 and entries(r) == 2, r
    for lang in ("en", "fr"):
        assert tg.get("a.example", p, headers=[("Accept-Language", lang)]).status == 200
    assert tg.hits("a.example", p) == 4


def test_tag_purge_stays_within_the_requests_host(tg):
    t = "shared" + prefix()[1:]
    p = "/host" + prefix()
    tg.route(p, [("Surrogate-Key", t)])
    for h in HOSTS:
        tg.fill(h, p)
    r = tg.purge_tags("a.example", t)
    assert r.status == 200 and entries(r) == 1
    assert not tg.cached("a.example", p)
    assert tg.cached("b.example", p)
    # The location form bounds a tag purge the same way (its KEY's host is the request's).
    r = tg.get("b.example", "/purge-tags", method="GET", headers=[("Surrogate-Key", t)])
    assert r.status == 200 and entries(r) == 1
    assert not tg.cached("b.example", p)


def test_tag_purge_refuses_bad_tag_lists(tg):
    assert tg.purge_tags("a.example", "").status == 400
    assert tg.purge_tags("a.example", " ".join(f"t{i}" for i in range(300))).status == 400
    assert tg.purge_tags("a.example", "caf\u00e9".encode().decode("latin-1")).status == 400
    assert "purge refused" in tg.server.error_log()


def test_oversized_and_non_ascii_origin_tags_are_dropped_with_a_log_line(tg):
    t = "big" + prefix()[1:]
    p = "/big" + prefix()
    many = " ".join([t] + [f"x{i:07d}" for i in range(3000)])  # ~27 KiB: past the 16 KiB a response keeps
    tg.route(p, [("Surrogate-Key", many), ("Cache-Tag", "ok-" + t + ",caf\u00e9".encode().decode("latin-1"))])
    tg.fill("a.example", p)
    assert "cache tags of" in tg.server.error_log()
    # The tags read first are kept up to the limit; the Cache-Tag ones came after it.
    assert tg.purge_tags("a.example", "ok-" + t).status == 404
    r = tg.purge_tags("a.example", t)
    assert r.status == 200 and entries(r) == 1
    assert tg.server.alive()


def test_soft_purge_serves_stale_once_while_one_background_fetch_refreshes(tg):
    t = "soft" + prefix()[1:]
    p = "/stale/" + prefix()
    tg.route(p, [("Surrogate-Key", t)])
    first = tg.fill("a.example", p)
    r = tg.purge_tags("a.example", t, soft=True)
    assert r.status == 200 and entries(r) == 1 and b"soft purge" in r.body, r
    r = tg.get("a.example", p)
    assert r.body == first.body  # the stale copy at once...
    deadline = time.monotonic() + 5
    while tg.hits("a.example", p) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tg.hits("a.example", p) == 2  # ...while one background fetch refreshes it
    time.sleep(0.3)
    for _ in range(4):  # both workers: connections land on either core
        r = tg.get("a.example", p)
        assert r.body != first.body and r.body.endswith(b"#2"), r.body
    assert tg.hits("a.example", p) == 2
    assert tg.metric("cache_soft_purged_stale_total", zone="tagged") >= 1
    assert tg.metric("cache_soft_purges_total", zone="tagged") >= 1


def test_soft_purge_without_stale_permission_revalidates(tg):
    p = "/reval/" + prefix()

    def reply(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"v1"':
            return Reply(304, [("ETag", '"v1"'), ("Cache-Control", "max-age=60")])
        return Reply(200, [("ETag", '"v1"'), ("Cache-Control", "max-age=60")], b"validated body")

    tg.origin.route(p, reply)
    tg.fill("a.example", p)
    r = tg.get("a.example", p, method="PURGE", headers=[("Fastly-Soft-Purge", "1")])
    assert r.status == 200 and entries(r) == 1
    assert tg.get("a.example", p).body == b"validated body"
    assert tg.hits("a.example", p) == 2
    with tg.origin.lock:
        assert tg.origin.log[p][1].header("If-None-Match") == '"v1"'  # a revalidation, not a refetch
    assert tg.cached("a.example", p)


def test_tag_index_is_rebuilt_by_the_cache_loader_after_a_restart(tg):
    t = "restart" + prefix()[1:]
    p = "/restart" + prefix()
    tg.route(p, [("Surrogate-Key", t)])
    tg.fill("a.example", p)
    assert tg.server.stop() == 0
    tg.server = sut.ServerProcess(sut.SUT, tg.workdir, tags_config(tg.port, tg.origin.port, tg.workdir),
                                  [tg.port]).start()
    deadline = time.monotonic() + 10
    while tg.metric("cache_loaded", zone="tagged") != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tg.cached("a.example", p)
    assert tg.metric("cache_tags", zone="tagged") >= 1
    r = tg.purge_tags("a.example", t)
    assert r.status == 200 and entries(r) == 1
    assert not tg.cached("a.example", p)
    assert tg.metric("cache_zone_purges_total", zone="tagged", kind="tag") >= 1


def json_purge(tg: Tagged, host: str, doc, target: str = "/purge-tags") -> sut.Response:
    body = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
    return tg.get(host, target, method="POST", headers=[("Content-Type", "application/json")], body=body)


def test_json_purge_by_host_clears_every_entry_of_that_host_only(tg):
    paths = ["/site" + prefix() for _ in range(3)]
    for p in paths:
        tg.route(p, [])
        for h in HOSTS:
            tg.fill(h, p)
    r = json_purge(tg, "b.example", {"hosts": ["b.example"]})
    assert r.status == 200 and entries(r) >= 3, r
    assert not any(tg.cached("b.example", p) for p in paths)
    assert all(tg.cached("a.example", p) for p in paths)
    # Another host's entries need any_host (the control-plane location).
    assert json_purge(tg, "b.example", {"hosts": ["a.example"]}).status == 403
    assert all(tg.cached("a.example", p) for p in paths)
    r = json_purge(tg, "b.example", {"hosts": ["A.Example"]}, target="/purge-api")
    assert r.status == 200 and entries(r) >= 3, r
    assert not any(tg.cached("a.example", p) for p in paths)


def test_json_purge_by_tags_and_prefixes_and_soft(tg):
    t = "jt" + prefix()[1:]
    base = "/pre" + prefix()
    tagged, under, other = base + "/tagged", base + "/dir/x", "/other" + prefix()
    tg.route(tagged, [("Cache-Tag", t)])
    tg.route(under, [])
    tg.route(other, [])
    for p in (tagged, under, other):
        tg.fill("a.example", p)
    r = json_purge(tg, "a.example", {"tags": [t], "prefixes": [f"http:a.example{base}/dir/"]})
    assert r.status == 200 and entries(r) == 2, r
    assert not tg.cached("a.example", tagged) and not tg.cached("a.example", under)
    assert tg.cached("a.example", other)
    # A prefix outside the request's host is refused without any_host.
    assert json_purge(tg, "a.example", {"prefixes": ["http:b.example/"]}).status == 403
    assert json_purge(tg, "a.example", {"prefixes": ["http:a.examplex/"]}).status == 403
    # Soft: marked stale, the next request refetches (no stale permission in this location).
    r = json_purge(tg, "a.example", {"prefixes": [f"http:a.example{other}"], "soft": True})
    assert r.status == 200 and b"soft purge" in r.body and entries(r) == 1, r
    assert not tg.cached("a.example", other)


def test_json_purge_refuses_bad_documents(tg):
    for doc in ["not json", "{}", '{"tags": "x"}', '{"tags": [1]}', '{"hosts": ["bad host"]}',
                json.dumps({"tags": [f"t{i}" for i in range(300)]}), '{"soft": "yes", "tags": ["a"]}']:
        r = json_purge(tg, "a.example", doc)
        assert r.status == 400, (doc, r)
    r = json_purge(tg, "a.example", '{"tags": ["' + "x" * 70000 + '"]}')
    assert r.status == 413, r
    assert tg.server.alive()


@pytest.mark.parametrize("how", ["exact", "tag"])
def test_a_fill_in_flight_during_a_purge_is_not_served_fresh_afterwards(tg, how):
    import threading
    t = "inflight" + prefix()[1:]
    p = "/inflight" + prefix()

    def slow(req: OriginRequest, n: int) -> Reply:
        return Reply(200, [("Cache-Control", "max-age=60"), ("Surrogate-Key", t)], b"v%d" % n,
                     delay=1.0 if n == 1 else 0)

    tg.origin.route(p, slow)
    first: dict = {}
    th = threading.Thread(target=lambda: first.setdefault("r", tg.get("a.example", p)))
    th.start()
    time.sleep(0.4)  # the request to the origin is out; its answer comes after the purge
    r = tg.purge_tags("a.example", t) if how == "tag" else tg.get("a.example", p, method="PURGE")
    assert r.status == 404  # nothing stored yet
    th.join()
    assert first["r"].body == b"v1"
    # What the fill stored may predate the purge: it is not a fresh hit.
    r = tg.get("a.example", p)
    assert r.body == b"v2" and tg.hits("a.example", p) == 2
    assert tg.cached("a.example", p)  # the refetch after the purge is fresh


@pytest.mark.parametrize("kind", ["hosts", "prefixes", "soft-tags"])
def test_json_purge_kinds_take_every_vary_variant(tg, kind):
    t = "vv" + prefix()[1:]
    p = "/vv" + prefix()
    tg.route(p, [("Surrogate-Key", t), ("Vary", "Accept-Language")])
    for lang in ("en", "fr"):
        assert tg.get("b.example", p, headers=[("Accept-Language", lang)]).status == 200
        assert tg.get("b.example", p, headers=[("Accept-Language", lang)]).status == 200
    assert tg.hits("b.example", p) == 2
    doc = {"hosts": {"hosts": ["b.example"]}, "prefixes": {"prefixes": [f"http:b.example{p}"]},
           "soft-tags": {"tags": [t], "soft": True}}[kind]
    r = json_purge(tg, "b.example", doc)
    assert r.status == 200 and entries(r) >= 2, r
    for lang in ("en", "fr"):
        assert tg.get("b.example", p, headers=[("Accept-Language", lang)]).status == 200
    assert tg.hits("b.example", p) == 4  # each variant fetched again
