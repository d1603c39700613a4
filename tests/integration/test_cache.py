"""End-to-end tests of the proxy cache (core/cache/): the real kosoku binary in front of a scripted python origin
that counts the requests it receives per path ("origin hits", shared/cases/http-conformance.md §0.4), so a hit
is told from a miss without relying on any header of the product under test. Every test uses its own random
path prefix, so cached state never leaks between tests or runs.

Sequences: MISS→HIT, expiry, revalidation with 304, stale on origin down/5xx, proxy_cache_lock collapsing
concurrent misses into one origin request (across both workers), lock timeout, purge (exact, wildcard, all,
the purge location), restart keeps the cache (the cache loader), max_size eviction, min_uses, bypass,
proxy_cache_convert_head, split_clients over two cache paths and background update. Ranges, conditionals and
the conformance cases through the cache are in test_cache_conditionals.py; the harness is cache_harness.py.

kosoku only: the configuration uses kosoku's purge and disk_queue directives (nginx has no proxy_cache_purge).
"""
from __future__ import annotations

import collections
import os
import threading
import time

import pytest

import sut
from cache_harness import (  # noqa: F401 (env and _alive are fixtures)
    HOST,
    OriginRequest,
    Reply,
    Origin,
    start_server,
    env,
    prefix,
    get,
    status,
    fixed,
    _alive,
)

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's proxy cache (purge, disk_queue directives)")


# ------------------------------------------------------------------------------------------------------------
# Basic sequences.


def test_miss_then_hit_with_age(env):
    p = prefix() + "/a"
    env.origin.route(p, fixed(b"hello cache", extra=[("ETag", '"a1"')]))
    r1 = get(env.port, p)
    assert (r1.status, r1.body, status(r1)) == (200, b"hello cache", "MISS")
    assert not r1.has("Age")
    time.sleep(1.1)
    r2 = get(env.port, p)
    assert (r2.status, r2.body, status(r2)) == (200, b"hello cache", "HIT")
    assert r2.header("ETag") == '"a1"'
    assert r2.header("Content-Type") == "text/plain"
    assert r2.header("Content-Length") == "11"
    assert int(r2.header("Age")) >= 1  # RFC 9111 §5.1: a reused response carries Age
    assert env.origin.count(p) == 1
    # The origin never sees the client's conditional fields for a cacheable request (the cache answers them).
    r3 = get(env.port, p, headers=[("If-None-Match", '"zzz"'), ("Range", "bytes=0-1")])
    assert (r3.status, r3.body) == (206, b"he")
    assert env.origin.count(p) == 1


def test_entry_is_committed_before_the_miss_response_ends(env):
    # nginx renames the temp file before it finalizes the request; so does kosoku: a request that follows a
    # completed MISS — on either worker — is a HIT, never a second origin request.
    p = prefix()
    for i in range(30):
        env.origin.route(f"{p}/{i}", fixed(b"x" * (i * 997)))
        assert status(get(env.port, f"{p}/{i}")) == "MISS"
        assert status(get(env.port, f"{p}/{i}")) == "HIT", i
        assert env.origin.count(f"{p}/{i}") == 1


def test_query_is_part_of_the_key(env):
    p = prefix() + "/q"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], req.target.encode()))
    assert get(env.port, p + "?a=1").body == (p + "?a=1").encode()
    assert get(env.port, p + "?a=2").body == (p + "?a=2").encode()
    assert status(get(env.port, p + "?a=1")) == "HIT"
    assert env.origin.count(p) == 2


def test_expiry_refetches(env):
    p = prefix() + "/exp"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=2")], b"v%d" % n))
    assert get(env.port, p).body == b"v1"
    assert status(get(env.port, p)) == "HIT"
    time.sleep(3.1)
    r = get(env.port, p)
    assert (r.body, status(r)) == (b"v2", "EXPIRED")
    assert status(get(env.port, p)) == "HIT"
    assert env.origin.count(p) == 2


def test_default_validity_by_status(env):
    p = prefix()
    env.origin.route(p + "/plain", lambda req, n: Reply(200, [], b"plain"))  # no explicit freshness: 60s
    env.origin.route(p + "/missing", lambda req, n: Reply(404, [], b"gone %d" % n))  # 3s
    env.origin.route(p + "/created", lambda req, n: Reply(201, [], b"made"))  # not cached
    for _ in range(2):
        get(env.port, p + "/plain")
        get(env.port, p + "/missing")
        get(env.port, p + "/created")
    assert env.origin.count(p + "/plain") == 1
    assert env.origin.count(p + "/missing") == 1
    assert env.origin.count(p + "/created") == 2
    time.sleep(3.2)
    assert get(env.port, p + "/missing").body == b"gone 2"


def test_revalidation_with_304(env):
    p = prefix() + "/rv"

    def handler(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"v1"':
            return Reply(304, [("ETag", '"v1"'), ("Cache-Control", "max-age=30"), ("X-Revalidated", str(n))])
        return Reply(200, [("ETag", '"v1"'), ("Cache-Control", "max-age=1"), ("Content-Type", "text/plain")],
                     b"body v1")

    env.origin.route(p, handler)
    assert get(env.port, p).body == b"body v1"
    time.sleep(2.1)
    r = get(env.port, p)
    assert (r.status, r.body, status(r)) == (200, b"body v1", "REVALIDATED")
    assert r.header("X-Revalidated") == "2"  # the 304's fields are merged into the stored head (RFC 9111 §4.3.4)
    assert r.header("Cache-Control") == "max-age=30"
    assert env.origin.log[p][1].header("If-None-Match") == '"v1"'  # RFC 9111 §4.3.1
    time.sleep(0.3)  # the entry is rewritten with the merged head in the background
    r = get(env.port, p)
    assert (r.body, status(r), r.header("X-Revalidated")) == (b"body v1", "HIT", "2")
    assert env.origin.count(p) == 2


def test_max_age_zero_with_validator_revalidates_every_time(env):
    p = prefix() + "/mz"

    def handler(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"z"':
            return Reply(304, [("ETag", '"z"'), ("Cache-Control", "max-age=0")])
        return Reply(200, [("ETag", '"z"'), ("Cache-Control", "max-age=0")], b"zero body")

    env.origin.route(p, handler)
    assert status(get(env.port, p)) == "MISS"
    for _ in range(3):
        r = get(env.port, p)
        assert (r.body, status(r)) == (b"zero body", "REVALIDATED")
    assert env.origin.count(p) == 4
    assert all(req.header("If-None-Match") == '"z"' for req in env.origin.log[p][1:])


def test_revalidation_validators_sent_without_the_clients_fields(env):
    # proxy_pass_request_headers off drops the client's fields, not the cache's own: the revalidation still
    # carries the stored validator (RFC 9111 §4.3.1) and a 304 refreshes the entry.
    p = "/norh" + prefix()

    def handler(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"n"':
            return Reply(304, [("ETag", '"n"'), ("Cache-Control", "max-age=0")])
        return Reply(200, [("ETag", '"n"'), ("Cache-Control", "max-age=0")], b"norh body")

    env.origin.route(p, handler)
    assert status(get(env.port, p)) == "MISS"
    r = get(env.port, p, headers=[("X-Client", "1")])
    assert (r.body, status(r)) == (b"norh body", "REVALIDATED")
    assert env.origin.log[p][1].header("If-None-Match") == '"n"'
    assert env.origin.log[p][1].header("X-Client") is None  # the client's own fields stay off


def test_response_cut_off_by_origin_is_never_cached(env):
    p = prefix() + "/cut"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"x" * 100000, cut_after=5000))
    ex = sut.exchange(env.port, sut.build_request("GET", p, host=HOST), timeout=5)
    assert not ex.finals or len(ex.finals[0].body) < 100000  # the client never sees it as complete
    ex = sut.exchange(env.port, sut.build_request("GET", p, host=HOST), timeout=5)
    assert env.origin.count(p) == 2


def test_min_uses(env):
    p = "/minuses" + prefix()
    env.origin.route(p, fixed(b"mu"))
    assert status(get(env.port, p)) == "MISS"
    assert status(get(env.port, p)) == "MISS"  # second use: stored now
    assert status(get(env.port, p)) == "HIT"
    assert env.origin.count(p) == 2


def test_bypass_and_no_cache(env):
    p = "/bypass" + prefix()
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"n%d" % n))
    assert get(env.port, p + "?nostore=1").body == b"n1"  # not stored
    assert status(get(env.port, p)) == "MISS"
    assert status(get(env.port, p)) == "HIT"
    r = get(env.port, p + "?nocache=1")  # a different key, but bypass: no lookup, response stored
    assert (r.body, status(r)) == (b"n3", "BYPASS")
    assert status(get(env.port, p + "?nocache=1")) == "BYPASS"
    assert env.origin.count(p) == 4


def test_head_is_fetched_as_get_and_stored(env):
    p = prefix() + "/head"
    env.origin.route(p, fixed(b"0123456789"))
    r = get(env.port, p, method="HEAD")
    assert (r.status, r.body, r.header("Content-Length")) == (200, b"", "10")
    assert env.origin.log[p][0].method == "GET"  # proxy_cache_convert_head on
    r = get(env.port, p)
    assert (r.body, status(r)) == (b"0123456789", "HIT")
    assert env.origin.count(p) == 1


def test_uncacheable_methods_pass_through(env):
    p = prefix() + "/post"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"p%d" % n))
    assert get(env.port, p, method="POST").body == b"p1"
    r = get(env.port, p, method="POST")
    assert (r.body, status(r)) == (b"p2", None)


# ------------------------------------------------------------------------------------------------------------
# Cache lock.


def parallel(n: int, fn) -> list:
    out: list = [None] * n
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, fn())) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_lock_collapses_concurrent_misses(env):
    p = prefix() + "/slow"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"slow body %d" % n,
                                             delay=1.0))
    rs = parallel(12, lambda: get(env.port, p))
    assert env.origin.count(p) == 1  # one origin request for 12 concurrent misses, on both workers
    assert all(r.status == 200 and r.body == b"slow body 1" for r in rs)
    st = collections.Counter(status(r) for r in rs)
    assert st["MISS"] == 1 and st["HIT"] == 11, st


def test_lock_timeout_goes_to_origin_uncached(env):
    p = "/lockto" + prefix()
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60")], b"t%d" % n, delay=2.0))
    t0 = time.monotonic()
    rs = parallel(2, lambda: get(env.port, p))
    assert env.origin.count(p) == 2
    assert time.monotonic() - t0 < 4.5
    assert sorted(r.body for r in rs) == [b"t1", b"t2"]
    assert status(get(env.port, p)) == "HIT"  # the lock holder's response was stored
    assert env.origin.count(p) == 2


# ------------------------------------------------------------------------------------------------------------
# Stale content.


def test_stale_when_origin_down_and_background_update(env):
    p = "/bg" + prefix()
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=3")], b"b%d" % n))
    assert get(env.port, p).body == b"b1"
    time.sleep(3.2)
    r = get(env.port, p)
    assert (r.body, status(r)) == (b"b1", "STALE")  # answered at once; refreshed in the background
    time.sleep(0.5)
    r = get(env.port, p)
    assert (r.body, status(r)) == (b"b2", "HIT")
    assert env.origin.count(p) == 2


def test_updating_serves_stale_while_one_request_refreshes(env):
    p = "/upd" + prefix()
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=1")], b"u%d" % n,
                                             delay=0 if n == 1 else 1.5))
    assert get(env.port, p).body == b"u1"
    time.sleep(2.1)
    results: dict[str, tuple] = {}

    def refresh() -> None:
        r = get(env.port, p)
        results["refresh"] = (r.body, status(r))

    t = threading.Thread(target=refresh)
    t.start()
    time.sleep(0.4)
    t0 = time.monotonic()
    r = get(env.port, p)
    elapsed = time.monotonic() - t0
    t.join()
    assert (r.body, status(r)) == (b"u1", "UPDATING")  # the stale copy, at once, while the refresh runs
    assert elapsed < 1.0
    assert results["refresh"] == (b"u2", "EXPIRED")
    assert env.origin.count(p) == 2


# ------------------------------------------------------------------------------------------------------------
# Purge.


def test_purge_exact_wildcard_all(env):
    p = prefix()
    for name in ("a.png", "b.png", "page.html"):
        env.origin.route(f"{p}/img/{name}" if name.endswith("png") else f"{p}/{name}", fixed(name.encode()))
    for t in (f"{p}/img/a.png", f"{p}/img/b.png", f"{p}/page.html"):
        assert status(get(env.port, t)) == "MISS"
        assert status(get(env.port, t)) == "HIT"
    r = get(env.port, f"{p}/page.html", method="PURGE")
    assert r.status == 200
    assert get(env.port, f"{p}/page.html", method="PURGE").status == 404
    assert env.origin.count(f"{p}/page.html") == 1  # PURGE is never forwarded upstream
    assert status(get(env.port, f"{p}/page.html")) == "MISS"
    r = get(env.port, f"{p}/img/*", method="PURGE")
    assert r.status == 200 and b"Entries: 2" in r.body
    assert status(get(env.port, f"{p}/img/a.png")) == "MISS"
    assert status(get(env.port, f"{p}/img/b.png")) == "MISS"
    # The purge location: key from the query.
    assert get(env.port, f"/purge/?key={p}/img/a.png").status == 200
    assert get(env.port, f"/purge/?key={p}/img/a.png").status == 404
    assert status(get(env.port, f"{p}/img/a.png")) == "MISS"
    # Purge all.
    assert get(env.port, "/purge-all").status == 200
    assert status(get(env.port, f"{p}/img/b.png")) == "MISS"


def test_purge_variants(env):
    p = prefix() + "/v"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")],
                                             (req.header("Accept-Language") or "none").encode()))
    for lang in ("en", "fr"):
        get(env.port, p, headers=[("Accept-Language", lang)])
        assert status(get(env.port, p, headers=[("Accept-Language", lang)])) == "HIT"
    r = get(env.port, p, method="PURGE")
    assert r.status == 200 and b"Entries: 3" in r.body  # the primary and both variants
    for lang in ("en", "fr"):
        assert status(get(env.port, p, headers=[("Accept-Language", lang)])) == "MISS"


# ------------------------------------------------------------------------------------------------------------
# Several cache paths, eviction, restart.


def test_split_clients_spreads_keys_over_zones(env):
    p = "/split" + prefix()
    paths = [f"{p}/{i}" for i in range(16)]
    for t in paths:
        env.origin.route(t, fixed(t.encode()))
        get(env.port, t)
        assert status(get(env.port, t)) == "HIT"

    def files(d: str) -> int:
        return sum(1 for f in (env.workdir / d).rglob("*") if f.is_file())

    assert files("d1") > 0 and files("d2") > 0
    assert files("d1") + files("d2") == 16


def test_max_size_eviction(env):
    p = "/small" + prefix()
    body = os.urandom(100 * 1024)
    for i in range(6):
        env.origin.route(f"{p}/{i}", fixed(body))
        assert get(env.port, f"{p}/{i}").body == body
        time.sleep(1.05)  # the zone's LRU clock counts seconds (cache_zone.hh)
    time.sleep(1.5)  # the cache manager runs every second
    total = sum(f.stat().st_size for f in (env.workdir / "small").rglob("*") if f.is_file())
    assert total <= 300 * 1024
    assert status(get(env.port, f"{p}/5")) == "HIT"  # the most recent stay
    assert status(get(env.port, f"{p}/0")) == "MISS"  # the least recently used went
    assert env.origin.count(f"{p}/0") == 2


def test_restart_keeps_cache(tmp_path):
    origin = Origin()
    port = sut.free_port()
    p = prefix()
    origin.route(p + "/keep", fixed(b"kept across restarts"))
    origin.route(p + "/vary", lambda req, n: Reply(200, [("Cache-Control", "max-age=60"),
                                                          ("Vary", "Accept-Language")], b"lang"))
    s = start_server(tmp_path, port, origin)
    try:
        assert status(get(port, p + "/keep")) == "MISS"
        get(port, p + "/vary", headers=[("Accept-Language", "en")])
        time.sleep(0.2)
    finally:
        assert s.stop() == 0
    # A new port: the old one may still have TIME_WAIT connections (what matters here is the cache directory).
    port = sut.free_port()
    s = start_server(tmp_path, port, origin)
    try:
        time.sleep(0.5)  # the cache loader
        r = get(port, p + "/keep")
        assert (r.body, status(r)) == (b"kept across restarts", "HIT")
        assert status(get(port, p + "/vary", headers=[("Accept-Language", "en")])) == "HIT"
        assert origin.count(p + "/keep") == 1 and origin.count(p + "/vary") == 1
        assert "http file cache:" in s.error_log()
    finally:
        assert s.stop() == 0
        origin.stop()


def test_status_page_shows_cache_counters(env):
    import json

    p = prefix() + "/st"
    env.origin.route(p, fixed(b"stats"))
    get(env.port, p)
    for _ in range(3):
        assert status(get(env.port, p)) == "HIT"
    doc = json.loads(get(env.port, "/kosoku-status?format=json").body)
    metrics = doc["extra"]["proxy_cache"]
    by = lambda name, **labels: [m["value"] for m in metrics
                                 if m["name"] == name and all(m["labels"].get(k) == v for k, v in labels.items())]
    assert sum(by("cache_responses_total", status="HIT")) >= 3
    assert sum(by("cache_responses_total", status="MISS")) >= 1
    assert by("cache_entries", zone="main")[0] >= 1
    assert by("cache_bytes", zone="main")[0] > 0
    assert by("cache_max_size_bytes", zone="small") == [300 * 1024]
    assert by("cache_loaded", zone="main") == [1]
    prom = get(env.port, "/kosoku-status?format=prometheus").body.decode()
    assert 'kosoku_cache_responses_total{core="0",status="HIT"}' in prom
