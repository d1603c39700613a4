"""Ranges and conditionals through the proxy cache (core/cache/, core/http/response_step.hh), on a HIT and on a
MISS, and the conformance cases (shared/cases/http-conformance.md) for proxy.example.com: a range never exposes
cache-file bytes, weak ETags and lists on a hit, a 304 carries the 200's fields, Set-Cookie never leaks, Vary
is part of the key, stale on error and when forbidden. The harness is cache_harness.py.

kosoku only: the configuration uses kosoku's purge and disk_queue directives.
"""
from __future__ import annotations

import collections
import time

import pytest

import sut
from cache_harness import (  # noqa: F401 (env and _alive are fixtures)
    HOST,
    OriginRequest,
    Reply,
    http_date,
    env,
    prefix,
    get,
    status,
    fixed,
    _alive,
)

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's proxy cache (purge, disk_queue directives)")


# ------------------------------------------------------------------------------------------------------------
# Conformance cases (shared/cases/http-conformance.md) for proxy.example.com.


def test_ranges_never_expose_cache_file_bytes(env):
    p = prefix() + "/c13"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60"),
                                                   ("X-Origin-Secret", "c13-secret-header")], b"0123456789"))
    assert get(env.port, p).body == b"0123456789"
    raw = (f"GET {p} HTTP/1.1\r\nHost: {HOST}\r\nRange: bytes=-1000,-9223372036854774808\r\n"
           f"Connection: close\r\n\r\n").encode()
    ex = sut.exchange(env.port, raw)
    r = ex.one()
    assert r.status in (200, 206, 416)
    assert b"c13-secret-header" not in r.body and b"KSKCACH" not in r.body and b"http:" not in r.body
    assert len(r.body) <= 2048
    if r.status == 206:
        assert r.header("Content-Range") == "bytes 0-9/10" and r.body == b"0123456789"
    for rng, want_status, want_body in (("bytes=-1000", 206, b"0123456789"), ("bytes=-0", 416, None),
                                        ("bytes=0-99999999999999999999999", 206, b"0123456789"),
                                        ("bytes=8-", 206, b"89"), ("bytes=10-", 416, None)):
        r = get(env.port, p, headers=[("Range", rng)])
        assert r.status == want_status, rng
        if want_body is not None:
            assert r.body == want_body
        else:
            assert r.header("Content-Range") == "bytes */10"
    assert env.origin.count(p) == 1


def test_weak_etags_and_lists_on_a_hit(env):
    p = prefix() + "/c15"
    env.origin.route(p, lambda req, n: Reply(200, [("ETag", 'W/"c15"'), ("Cache-Control", "max-age=60")],
                                             b"hello c15"))
    assert get(env.port, p).body == b"hello c15"
    for inm, want in (('W/"c15"', 304), ('"c15"', 304), ('"x", W/"c15"', 304), ('"x", "y"', 200), ("*", 304)):
        r = get(env.port, p, headers=[("If-None-Match", inm)])
        assert r.status == want, inm
        assert r.body == (b"" if want == 304 else b"hello c15")
    assert env.origin.count(p) == 1  # RFC 9111 §4.3.2: the cache answers the conditionals itself


def test_304_carries_the_200s_fields(env):
    p = prefix() + "/c17"
    expires = http_date(time.time() + 60)
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=60"), ("ETag", '"c17"'),
                                                   ("Vary", "Accept-Encoding"), ("Expires", expires),
                                                   ("Content-Location", p)], b"c17 body"))
    full = get(env.port, p)
    assert full.body == b"c17 body"
    r = get(env.port, p, headers=[("If-None-Match", '"c17"')])
    assert r.status == 304 and r.body == b""
    for name in ("Date", "ETag", "Vary", "Cache-Control", "Expires", "Content-Location"):
        assert r.header(name) is not None, name
    assert r.header("ETag") == '"c17"'
    assert r.header("Vary") == "Accept-Encoding" and r.header("Expires") == expires
    assert r.header("Content-Length") in (None, "8")
    assert env.origin.count(p) == 1


def test_set_cookie_never_leaks(env):
    p = prefix()

    def cookie(cc: str):
        return lambda req, n: Reply(200, [("Cache-Control", cc),
                                          ("Set-Cookie", "session=USER-A-SECRET; Path=/" if n == 1 else
                                           "session=USER-B; Path=/")], b"c22 body")

    for path, cc in ((p + "/c22", "public, max-age=60"), (p + "/c22b", 'no-cache="Set-Cookie", max-age=60')):
        env.origin.route(path, cookie(cc))
        a = get(env.port, path)
        assert "USER-A-SECRET" in (a.header("Set-Cookie") or "")
        b = get(env.port, path)
        assert "USER-A-SECRET" not in (b.header("Set-Cookie") or "")
        assert "USER-A-SECRET" not in b.raw_head.decode("latin-1")
    # With proxy_ignore_headers Set-Cookie the response is stored, without its Set-Cookie.
    q = "/ignore" + prefix()
    env.origin.route(q, cookie("public, max-age=60"))
    assert "USER-A-SECRET" in (get(env.port, q).header("Set-Cookie") or "")
    b = get(env.port, q)
    assert status(b) == "HIT" and not b.has("Set-Cookie")


def test_vary_is_part_of_the_key(env):
    p = prefix()
    env.origin.route(p + "/c23", lambda req, n: Reply(200, [("Cache-Control", "max-age=60"),
                                                            ("Vary", "Accept-Language")],
                                                      b"lang=" + (req.header("Accept-Language") or "none").encode()))
    bodies = [get(env.port, p + "/c23", headers=[("Accept-Language", l)] if l else []).body
              for l in ("en", "fr", "en", None)]
    assert bodies == [b"lang=en", b"lang=fr", b"lang=en", b"lang=none"]
    assert env.origin.count(p + "/c23") == 3
    env.origin.route(p + "/c23star", lambda req, n: Reply(200, [("Cache-Control", "max-age=60"), ("Vary", "*")],
                                                          b"star-%d" % n))
    assert [get(env.port, p + "/c23star").body for _ in range(2)] == [b"star-1", b"star-2"]


def test_stale_on_error_and_when_forbidden(env):
    p = prefix()

    def then(fail: Reply, cc: str):
        return lambda req, n: (Reply(200, [("ETag", '"c26"'), ("Cache-Control", cc)], b"fresh-1") if n == 1
                               else fail)

    bad = Reply(502, [("Content-Type", "text/plain")], b"upstream broke")
    cases = {"c26": then(bad, "max-age=1"), "c26b": then(bad, "max-age=1, must-revalidate"),
             "c26c": then(Reply(close_without_answer=True), "max-age=1"), "c26d": then(bad, "max-age=0, s-maxage=1")}
    for name, fn in cases.items():
        env.origin.route(f"{p}/{name}", fn)
        assert get(env.port, f"{p}/{name}").body == b"fresh-1"
    time.sleep(2.5)
    for name in ("c26", "c26c"):
        r = get(env.port, f"{p}/{name}")
        assert (r.status, r.body, status(r)) == (200, b"fresh-1", "STALE"), name
        assert r.has("Age"), name
    for name in ("c26b", "c26d"):
        r = get(env.port, f"{p}/{name}")
        assert r.status in (502, 504), name
        assert r.body != b"fresh-1"


# ------------------------------------------------------------------------------------------------------------
# A MISS answers the client's conditionals and ranges as a HIT does (nginx: the cache's request to the origin
# carries no If-*/Range; the not_modified and range filters run on the origin's 200 as it passes).


def test_miss_answers_if_none_match_with_304(env):
    p = prefix() + "/mc"
    env.origin.route(p, fixed(b"conditional body", extra=[("ETag", '"mc1"')]))
    r = get(env.port, p, headers=[("If-None-Match", '"mc1"')])
    assert (r.status, r.body, status(r), r.header("ETag")) == (304, b"", "MISS", '"mc1"')
    assert env.origin.log[p][0].header("If-None-Match") is None  # the origin got an unconditional GET
    r = get(env.port, p)  # the whole body was stored although the client got a 304
    assert (r.status, r.body, status(r)) == (200, b"conditional body", "HIT")
    r = get(env.port, p, headers=[("If-None-Match", '"mc1"')])
    assert (r.status, status(r)) == (304, "HIT")
    assert env.origin.count(p) == 1


def test_miss_answers_if_modified_since_and_preconditions(env):
    p = prefix() + "/mims"
    lm = http_date(time.time() - 3600)
    env.origin.route(p, fixed(b"dated body", extra=[("Last-Modified", lm)]))
    r = get(env.port, p, headers=[("If-Modified-Since", lm)])
    assert (r.status, r.body, status(r)) == (304, b"", "MISS")
    q = prefix() + "/mim"
    env.origin.route(q, fixed(b"tagged", extra=[("ETag", '"t1"')]))
    r = get(env.port, q, headers=[("If-Match", '"other"')])
    assert r.status == 412  # as a HIT would (RFC 9110 §13.2.2); add_header skips a 412 (nginx)
    assert env.origin.log[q][0].header("If-Match") is None
    # A miss whose If-None-Match does not match gets the whole 200.
    r = get(env.port, q, headers=[("If-None-Match", '"nope"')])
    assert (r.status, r.body) == (200, b"tagged")


def test_miss_answers_range_with_206_and_stores_the_whole_body(env):
    p = prefix() + "/mr"
    body = bytes(range(256)) * 400  # 102400 bytes: several reads through the proxy's ring
    env.origin.route(p, fixed(body, extra=[("ETag", '"mr"')]))
    r = get(env.port, p, headers=[("Range", "bytes=0-9")])
    assert (r.status, r.body, status(r)) == (206, body[:10], "MISS")
    assert r.header("Content-Range") == f"bytes 0-9/{len(body)}"
    assert r.header("Content-Length") == "10"
    assert env.origin.log[p][0].header("Range") is None
    r = get(env.port, p)  # the cache holds the FULL body
    assert (r.status, len(r.body), r.body == body, status(r)) == (200, len(body), True, "HIT")
    assert r.header("Content-Length") == str(len(body))
    assert env.origin.count(p) == 1
    # Further shapes on a miss: a range in the middle, a suffix, several ascending ranges (multipart),
    # an unsatisfiable one.
    for rng, first, last in (("bytes=70000-70009", 70000, 70009), ("bytes=-5", len(body) - 5, len(body) - 1)):
        q = prefix() + "/mr2"
        env.origin.route(q, fixed(body))
        r = get(env.port, q, headers=[("Range", rng)])
        assert (r.status, r.body, status(r)) == (206, body[first:last + 1], "MISS"), rng
        assert r.header("Content-Range") == f"bytes {first}-{last}/{len(body)}"
        assert get(env.port, q).body == body
    q = prefix() + "/mr3"
    env.origin.route(q, fixed(body))
    r = get(env.port, q, headers=[("Range", "bytes=1-2,50000-50001")])
    assert (r.status, status(r)) == (206, "MISS")
    ctype = r.header("Content-Type")
    assert ctype.startswith("multipart/byteranges; boundary=")
    boundary = ctype.split("boundary=")[1].encode()
    parts = [x for x in r.body.split(b"--" + boundary) if x.strip() not in (b"", b"--")]
    assert len(parts) == 2
    assert parts[0].endswith(b"\r\n\r\n" + body[1:3] + b"\r\n") and b"bytes 1-2/102400" in parts[0]
    assert parts[1].endswith(b"\r\n\r\n" + body[50000:50002] + b"\r\n") and b"bytes 50000-50001/102400" in parts[1]
    assert int(r.header("Content-Length")) == len(r.body)
    hit = get(env.port, q, headers=[("Range", "bytes=1-2,50000-50001")])
    assert (hit.status, status(hit), len(hit.body)) == (206, "HIT", len(r.body))
    q = prefix() + "/mr4"
    env.origin.route(q, fixed(b"0123456789"))
    r = get(env.port, q, headers=[("Range", "bytes=10-")])
    assert (r.status, r.header("Content-Range")) == (416, "bytes */10")  # add_header skips a 416 (nginx)


def test_expired_and_bypass_answer_ranges_too(env):
    p = prefix() + "/er"
    env.origin.route(p, lambda req, n: Reply(200, [("Cache-Control", "max-age=1")], b"version %d body" % n))
    assert get(env.port, p).body == b"version 1 body"
    time.sleep(2.1)
    r = get(env.port, p, headers=[("Range", "bytes=8-8")])
    assert (r.status, r.body, status(r)) == (206, b"2", "EXPIRED")
    assert status(get(env.port, p)) == "HIT"
    q = "/bypass" + prefix()
    env.origin.route(q, fixed(b"bypassed body", extra=[("ETag", '"bp"')]))
    r = get(env.port, q + "?nocache=1", headers=[("Range", "bytes=0-7")])
    assert (r.status, r.body, status(r)) == (206, b"bypassed", "BYPASS")
    r = get(env.port, q + "?nocache=1", headers=[("If-None-Match", '"bp"')])
    assert (r.status, status(r)) == (304, "BYPASS")


def test_background_update_revalidates_conditionally(env):
    # proxy_cache_background_update + proxy_cache_revalidate: the refresh carries the stale entry's validators and
    # the origin's 304 refreshes the entry's head and validity without sending the body again.
    p = "/bg" + prefix()
    sent = collections.Counter()
    lm = http_date(time.time() - 600)

    def handler(req: OriginRequest, n: int) -> Reply:
        if req.header("If-None-Match") == '"bg1"' and req.header("If-Modified-Since") == lm:
            sent[304] += 1
            return Reply(304, [("ETag", '"bg1"'), ("Cache-Control", "max-age=2"), ("X-Refresh", str(n))])
        sent[200] += 1
        return Reply(200, [("ETag", '"bg1"'), ("Last-Modified", lm), ("Cache-Control", "max-age=2"),
                           ("X-Refresh", str(n))], b"background body " * 1000)

    env.origin.route(p, handler)
    r = get(env.port, p)
    assert (status(r), r.header("X-Refresh")) == ("MISS", "1")
    for round_ in (2, 3):
        time.sleep(2.2)
        r = get(env.port, p)
        assert (r.status, status(r), len(r.body)) == (200, "STALE", 16000)  # the stale copy, at once
        deadline = time.time() + 3
        while sent[304] < round_ - 1 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the entry is rewritten with the merged head
        r = get(env.port, p)
        assert (r.status, status(r), r.body) == (200, "HIT", b"background body " * 1000)
        assert r.header("X-Refresh") == str(round_)  # the 304's fields were merged (RFC 9111 §4.3.4)
    assert (sent[200], sent[304]) == (1, 2)  # the body went over the wire once
    assert env.origin.log[p][1].header("If-None-Match") == '"bg1"'
