"""Dynamic per-host cache rules, end to end against the real binary (core/rules/): the admin API over HTTP
(`cache_rules_admin;` behind allow/deny), a rule change flipping `$cache_rule` at once on every core (seen
through `add_header X-Cache-Rule $cache_rule always;` on a static location, so it does not depend on the
proxy cache), the same flip through the real proxy cache (`proxy_cache_bypass $cache_rule; proxy_no_cache
$cache_rule;` in front of a python origin that counts its requests), persistence across a restart and across
a SIGKILL right after the PUT answered, and a malformed rules file refusing the start.

Each test starts its own kosoku (2 workers) with its own config. Skipped when SUT=nginx (kosoku's own
directives)."""
import collections
import http.client
import http.server
import json
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import sut

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku-only directives (cache_rules_*)")


class Kosoku:
    def __init__(self, tmp: Path, rules_file: Path | None = None, http_extra: str = "", workers: int = 2,
                 content: str = ""):
        self.dir = tmp
        self.port = sut.free_port()
        self.www = tmp / "www"
        self.www.mkdir(exist_ok=True)
        for name in ("a.jpg", "a.png", "a.html", "index.html"):
            (self.www / name).write_bytes(b"x\n")
        (self.www / "static").mkdir(exist_ok=True)
        (self.www / "static" / "app.js").write_bytes(b"js\n")
        rules = f"cache_rules_file {rules_file};" if rules_file else ""
        self.conf = tmp / "k.conf"
        self.conf.write_text(f"""
worker_processes {workers};
error_log {tmp}/error.log info;
events {{ worker_connections 1024; }}
http {{
    types {{ text/html html; image/jpeg jpg; image/png png; application/javascript js; }}
    {rules}
    {http_extra}
    log_format rules '$host $uri [$cache_rule]';
    access_log {tmp}/access.log rules;
    server {{
        listen 127.0.0.1:{self.port} default_server;
        server_name site.example other.example;
        root {self.www};
        add_header X-Cache-Rule $cache_rule always;
        {content}
        location /admin/ {{
            cache_rules_admin;
            allow 127.0.0.1;
            deny all;
        }}
        location = /status {{ status; }}
        location /locked/ {{
            cache_rules_admin;
            deny all;
        }}
    }}
}}
""")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([sut.kosoku_bin(), "-c", str(self.conf)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 15 * sut.SLOWDOWN
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"kosoku exited {self.proc.returncode}: {self.proc.stderr.read().decode()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError("kosoku did not start listening")

    def stop(self, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout=timeout * sut.SLOWDOWN)
        return self.proc.returncode if self.proc else 0

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def request(self, method, path, body=None, host="site.example", headers=None):
        """One request on a new connection: (status, headers dict (lower-case names), body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10 * sut.SLOWDOWN)
        h = {"Host": host}
        h.update(headers or {})
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def api(self, method, path, body=None):
        status, hdrs, data = self.request(method, "/admin/rules" + path, body)
        doc = json.loads(data) if data and method != "HEAD" else None
        return status, hdrs, doc

    def cache_rule(self, path, host="site.example"):
        """$cache_rule for a request ("" when the header is absent: nginx drops empty add_header values)."""
        status, hdrs, _ = self.request("GET", path, host=host)
        assert status == 200, (path, status)
        return hdrs.get("x-cache-rule", "")

    def requests_per_core(self):
        status, _, data = self.request("GET", "/status?format=json")
        assert status == 200
        return [c["requests"] for c in json.loads(data)["cores"]]


def test_admin_put_answered_at_once_then_a_pipelined_request(tmp_path):
    """Without a rules file the PUT is answered as its body ends, inside the connection's read: the GET pipelined
    behind it is answered right after, not when more bytes arrive or keepalive_timeout ends."""
    k = Kosoku(tmp_path).start()
    try:
        body = json.dumps({"patterns": [r"\.png$"]}).encode()
        with sut.Conn(k.port, timeout=5) as c:
            c.send(b"PUT /admin/rules/site.example HTTP/1.1\r\nHost: site.example\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body) +
                   b"GET /a.png HTTP/1.1\r\nHost: site.example\r\n\r\n")
            rs = c.read_responses(2, timeout=5)
        assert [r.status for r in rs] == [201, 200], rs
        assert rs[1].body == b"x\n"
    finally:
        assert k.stop() == 0, k.proc.stderr.read().decode()


@pytest.fixture
def server(tmp_path):
    k = Kosoku(tmp_path, rules_file=tmp_path / "rules.jsonl").start()
    yield k
    assert k.stop() == 0, k.proc.stderr.read().decode()


def test_admin_api_crud(server):
    assert server.api("GET", "/site.example")[0] == 404
    status, hdrs, doc = server.api("PUT", "/site.example", {"patterns": [r"\.png$", "^/static/"]})
    assert status == 201, doc
    assert doc == {"host": "site.example", "patterns": [r"\.png$", "^/static/"]}
    assert hdrs["content-type"] == "application/json"
    assert hdrs["cache-control"] == "no-store"
    status, _, doc = server.api("GET", "/Site.Example.")  # normalised like $host
    assert (status, doc) == (200, {"host": "site.example", "patterns": [r"\.png$", "^/static/"]})
    status, _, doc = server.api("PUT", "/site.example", {"host": "site.example", "patterns": [r"\.jpg$"]})
    assert (status, doc["patterns"]) == (200, [r"\.jpg$"])
    status, hdrs, _ = server.request("HEAD", "/admin/rules/site.example")
    assert status == 200 and int(hdrs["content-length"]) > 0

    # Invalid input: 400 with the reason, the old rules kept.
    status, _, doc = server.api("PUT", "/site.example", {"patterns": [r"\.png$", "(unclosed"]})
    assert status == 400
    assert doc == {"error": 'invalid pattern "(unclosed": missing ): (unclosed'}
    status, _, doc = server.api("PUT", "/site.example", b'{"patterns": [')
    assert status == 400 and doc["error"].startswith("invalid JSON at byte 14"), doc
    status, _, doc = server.api("PUT", "/site.example", {"patterns": "x"})
    assert status == 400
    status, _, doc = server.api("PUT", "/site.example", {"host": "other.example", "patterns": []})
    assert status == 400 and "is not the host of the path" in doc["error"]
    status, _, doc = server.api("PUT", "/bad%20host", {"patterns": []})
    assert (status, doc) == (400, {"error": 'invalid host "bad host"'})
    assert server.api("GET", "/site.example")[2]["patterns"] == [r"\.jpg$"]

    status, hdrs, _ = server.api("POST", "/site.example", {"patterns": []})
    assert status == 405 and hdrs["allow"] == "GET, HEAD, PUT, DELETE"
    assert server.api("PUT", "", {"patterns": []})[0] == 405
    assert server.request("GET", "/admin/other")[0] == 404

    status, _, doc = server.api("DELETE", "/site.example")
    assert (status, doc) == (200, {"host": "site.example", "deleted": True})
    assert server.api("GET", "/site.example")[0] == 404
    assert server.api("DELETE", "/site.example")[0] == 404


def test_admin_list_is_paginated(server):
    hosts = {f"h{i:02d}.example": [f"^/{i}/"] for i in range(23)}
    for h, p in hosts.items():
        assert server.api("PUT", "/" + h, {"patterns": p})[0] == 201
    seen = {}
    for offset in range(0, 30, 5):
        status, _, doc = server.api("GET", f"?offset={offset}&limit=5")
        assert status == 200
        assert (doc["count"], doc["offset"], doc["limit"]) == (23, offset, 5)
        assert len(doc["hosts"]) == max(0, min(5, 23 - offset))
        for e in doc["hosts"]:
            assert e["host"] not in seen
            seen[e["host"]] = e["patterns"]
    assert seen == hosts
    status, _, doc = server.api("GET", "")
    assert (doc["count"], doc["limit"], len(doc["hosts"])) == (23, 100, 23)


def test_admin_location_obeys_allow_deny(server):
    status, _, _ = server.request("GET", "/locked/rules")
    assert status == 403
    status, _, _ = server.request("PUT", "/locked/rules/site.example", body={"patterns": []})
    assert status == 403
    assert server.api("GET", "/site.example")[0] == 404  # nothing was changed


def test_rule_change_flips_cache_rule_at_once_on_every_core(server):
    # No rules: the default (cache) → $cache_rule is "" and the header is not sent.
    assert server.cache_rule("/a.jpg") == ""
    before = server.requests_per_core()
    rounds = 30
    for i in range(rounds):
        cached, not_cached = (r"\.jpg$", "/a.png") if i % 2 == 0 else (r"\.png$", "/a.jpg")
        assert server.api("PUT", "/site.example", {"patterns": [cached, "^/static/"]})[0] in (200, 201)
        # Immediately, each on a new connection (spread over the workers by SO_REUSEPORT):
        hit = server.cache_rule("/a.jpg" if i % 2 == 0 else "/a.png")
        miss = server.cache_rule(not_cached)
        static = server.cache_rule("/static/app.js")
        assert (hit, miss, static) == ("", "1", ""), i
    after = server.requests_per_core()
    served = [a - b for a, b in zip(after, before)]
    assert len(served) == 2 and sum(served) >= rounds * 4
    # Both workers answered a good share of the checks, so changes made on one core were seen on the other.
    assert min(served) >= rounds // 2, served
    # Other hosts keep the default; the Host's case and port do not matter.
    assert server.cache_rule("/a.html", host="other.example") == ""
    assert server.cache_rule("/a.html", host="SITE.example:80") == "1"
    # $uri, not the raw target: the query and percent-encoding do not change the decision.
    assert server.cache_rule("/a.jpg?x=1.png") == server.cache_rule("/a.jp%67") == "1"
    # Deleting the rules brings the default back at once.
    assert server.api("DELETE", "/site.example")[0] == 200
    assert server.cache_rule("/a.html") == ""


class CountingOrigin:
    """An HTTP/1.1 origin that answers every GET with 200, Cache-Control: max-age=600, and counts requests per
    path, so a cache hit is told from a miss without trusting any header of kosoku."""

    def __init__(self):
        hits = self.hits = collections.Counter()
        lock = self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                with lock:
                    hits[self.path] += 1
                body = f"origin {self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Cache-Control", "max-age=600")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, path):
        with self.lock:
            return self.hits[path]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_rule_change_flips_the_proxy_cache(tmp_path):
    origin = CountingOrigin()
    k = Kosoku(tmp_path, http_extra=f"proxy_cache_path {tmp_path}/cache levels=1:2 keys_zone=rules:10m;", content=f"""
        location /p/ {{
            proxy_pass http://127.0.0.1:{origin.port};
            proxy_cache rules;
            proxy_cache_valid 200 10m;
            proxy_cache_bypass $cache_rule;
            proxy_no_cache $cache_rule;
            add_header X-Cache-Status $upstream_cache_status always;
        }}""").start()
    try:
        def fetch(path, times=2):
            statuses = []
            for _ in range(times):
                status, hdrs, body = k.request("GET", path)
                assert (status, body) == (200, f"origin {path}\n".encode())
                statuses.append(hdrs.get("x-cache-status", ""))
                time.sleep(0.3)  # a new entry is committed once its file is written (disk queue)
            return statuses

        # No rules for the host: the default (cache).
        assert fetch("/p/default.html") == ["MISS", "HIT"]
        assert origin.count("/p/default.html") == 1
        # Only images are cached for site.example.
        assert k.api("PUT", "/site.example", {"patterns": [r"\.jpg$"]})[0] == 201
        assert fetch("/p/a.jpg") == ["MISS", "HIT"]
        assert origin.count("/p/a.jpg") == 1
        assert fetch("/p/a.html") == ["BYPASS", "BYPASS"]
        assert origin.count("/p/a.html") == 2
        # An already cached page of the host is bypassed once its rules say so.
        assert fetch("/p/default.html", 1) == ["BYPASS"]
        assert origin.count("/p/default.html") == 2
        # Flip: pages cached, images not — at once, on new connections.
        assert k.api("PUT", "/site.example", {"patterns": [r"\.html$"]})[0] == 200
        assert fetch("/p/a.jpg") == ["BYPASS", "BYPASS"]
        assert origin.count("/p/a.jpg") == 3
        assert fetch("/p/a.html") == ["MISS", "HIT"]
        assert origin.count("/p/a.html") == 3
        # Another host on the same server is not affected.
        status, hdrs, _ = k.request("GET", "/p/a.jpg", host="other.example")
        assert status == 200 and hdrs.get("x-cache-status") in ("MISS", "HIT")
    finally:
        assert k.stop() == 0
        origin.stop()


def test_access_log_expands_cache_rule(tmp_path):
    k = Kosoku(tmp_path).start()
    try:
        assert k.api("PUT", "/site.example", {"patterns": [r"\.jpg$"]})[0] == 201
        k.cache_rule("/a.jpg")
        k.cache_rule("/a.html")
    finally:
        assert k.stop() == 0
    lines = (tmp_path / "access.log").read_text().splitlines()
    assert "site.example /a.jpg []" in lines
    assert "site.example /a.html [1]" in lines


def test_rules_survive_restart_and_kill(tmp_path):
    rules = tmp_path / "rules.jsonl"
    k = Kosoku(tmp_path, rules_file=rules).start()
    try:
        assert k.api("PUT", "/site.example", {"patterns": [r"\.png$"]})[0] == 201
        assert k.api("PUT", "/other.example", {"patterns": []})[0] == 201
        assert k.api("PUT", "/gone.example", {"patterns": ["x"]})[0] == 201
        assert k.api("DELETE", "/gone.example")[0] == 200
    finally:
        assert k.stop() == 0
    lines = [json.loads(l) for l in rules.read_text().splitlines() if l and not l.startswith("#")]
    assert sorted(lines, key=lambda d: d["host"]) == [
        {"host": "other.example", "patterns": []},
        {"host": "site.example", "patterns": [r"\.png$"]},
    ]
    assert not (tmp_path / "rules.jsonl.tmp").exists()

    k = Kosoku(tmp_path, rules_file=rules).start()
    try:
        assert k.api("GET", "/site.example")[2]["patterns"] == [r"\.png$"]
        assert k.cache_rule("/a.png") == ""
        assert k.cache_rule("/a.jpg") == "1"
        assert k.cache_rule("/a.jpg", host="other.example") == "1"  # empty list: nothing cached
        # The PUT answers only once the file is on disk: a SIGKILL right after it loses nothing.
        assert k.api("PUT", "/site.example", {"patterns": [r"\.jpg$"]})[0] == 200
        assert k.api("PUT", "/new.example", {"patterns": [r"\.css$"]})[0] == 201
    finally:
        k.kill()
    k = Kosoku(tmp_path, rules_file=rules).start()
    try:
        assert k.api("GET", "/site.example")[2]["patterns"] == [r"\.jpg$"]
        assert k.api("GET", "/new.example")[2]["patterns"] == [r"\.css$"]
        assert k.cache_rule("/a.jpg") == ""
        assert k.cache_rule("/a.png") == "1"
    finally:
        assert k.stop() == 0


def test_default_nocache(tmp_path):
    k = Kosoku(tmp_path, http_extra="cache_rules_default nocache; cache_rules_memo 0;").start()
    try:
        assert k.cache_rule("/a.jpg") == "1"
        assert k.api("PUT", "/site.example", {"patterns": [r"\.jpg$"]})[0] == 201
        assert k.cache_rule("/a.jpg") == ""
        assert k.cache_rule("/a.jpg", host="other.example") == "1"
    finally:
        assert k.stop() == 0


def test_malformed_rules_file_refuses_to_start(tmp_path):
    rules = tmp_path / "rules.jsonl"
    # Written by hand: the trailer declares the count, the patterns are validated.
    rules.write_text('{"host":"a.example","patterns":["ok"]}\n{"host":"b.example","patterns":["(x"]}\n'
                     '# checksum none hosts=2\n')
    k = Kosoku(tmp_path, rules_file=rules)
    p = subprocess.run([sut.kosoku_bin(), "-c", str(k.conf)], capture_output=True, timeout=30 * sut.SLOWDOWN)
    assert p.returncode == 1
    err = p.stderr.decode()
    assert f'cache_rules_file: {rules}: invalid pattern "(x": missing ): (x' in err, err
    # The file is left as it was.
    assert rules.read_text().count("\n") == 3


# ---- a rules file that does not match its own trailer ----

FIVE_HOSTS = {f"h{i}.example": [f"^/{i}/"] for i in range(5)}


@pytest.fixture
def written_rules(tmp_path):
    """A rules file kosoku wrote: five hosts, one PUT each (so five writes, the fourth kept as .prev)."""
    rules = tmp_path / "rules.jsonl"
    k = Kosoku(tmp_path, rules_file=rules).start()
    try:
        for h, p in FIVE_HOSTS.items():
            assert k.api("PUT", "/" + h, {"patterns": p})[0] == 201
    finally:
        assert k.stop() == 0
    return rules


def damage(text: str, how: str) -> str:
    lines = text.splitlines(keepends=True)
    assert lines[0].startswith("# kosoku cache rules") and lines[-1].startswith("# checksum fnv1a64="), lines
    assert len(lines) == 7  # header, five hosts, trailer
    if how == "empty":
        return ""
    if how == "cut-at-line-boundary":
        return "".join(lines[:3])  # the header and two hosts: what loaded as two hosts before
    if how == "no-trailer":
        return "".join(lines[:-1])
    if how == "count-mismatch":
        return "".join(lines[:3] + lines[4:])  # a host line gone, the trailer kept
    if how == "cut-mid-line":
        return text[: len(text) - len(lines[-1]) - len(lines[-2]) // 2]
    if how == "checksum-mismatch":
        return text.replace('"^/2/"', '"^/9/"')
    raise AssertionError(how)


EXPECTED_DAMAGE = {
    "empty": (1, "the file is empty"),
    "cut-at-line-boundary": (3, 'no "# checksum fnv1a64=HEX hosts=N" trailer after 2 host line(s): the file is '
                                "truncated or was not written by kosoku"),
    "no-trailer": (6, 'no "# checksum fnv1a64=HEX hosts=N" trailer after 5 host line(s)'),
    "count-mismatch": (6, "the trailer says hosts=5 but the file has 4 host line(s): the file is truncated or was "
                          "edited"),
    "cut-mid-line": (6, "the last line has no newline: the file is truncated"),
    "checksum-mismatch": (7, "the checksum of the host lines does not match the trailer"),
}


@pytest.mark.parametrize("how", list(EXPECTED_DAMAGE))
def test_rules_file_not_matching_its_trailer_refuses_to_start(tmp_path, written_rules, how):
    rules = written_rules
    prev = Path(str(rules) + ".prev")
    assert prev.exists(), "the writer keeps the file it replaced"
    damaged = damage(rules.read_text(), how)
    rules.write_text(damaged)
    line, message = EXPECTED_DAMAGE[how]
    expected = f"cache_rules_file: {rules}:{line}: {message}"
    k = Kosoku(tmp_path, rules_file=rules)
    started = subprocess.run([sut.kosoku_bin(), "-c", str(k.conf)], capture_output=True,
                             timeout=30 * sut.SLOWDOWN)
    err = started.stderr.decode()
    assert started.returncode == 1, err
    assert expected in err, err
    assert f"(the previous file kosoku wrote is {prev})" in err, err
    # `kosoku -t` fails with the same message.
    checked = subprocess.run([sut.kosoku_bin(), "-t", "-c", str(k.conf)], capture_output=True,
                             timeout=30 * sut.SLOWDOWN)
    terr = checked.stderr.decode()
    assert checked.returncode == 1, terr
    assert f"kosoku: [emerg] {expected}" in terr, terr
    assert f"configuration file {k.conf} test failed" in terr, terr
    assert rules.read_text() == damaged  # left as it was for the operator

    # The operator's way back: the previous file (four hosts) loads.
    prev.replace(rules)
    assert subprocess.run([sut.kosoku_bin(), "-t", "-c", str(k.conf)], capture_output=True,
                          timeout=30 * sut.SLOWDOWN).returncode == 0
    k.start()
    try:
        status, _, doc = k.api("GET", "")
        assert status == 200 and doc["count"] == 4, doc
    finally:
        assert k.stop() == 0


def test_config_test_accepts_an_intact_rules_file(tmp_path, written_rules):
    k = Kosoku(tmp_path, rules_file=written_rules)
    p = subprocess.run([sut.kosoku_bin(), "-t", "-c", str(k.conf)], capture_output=True, timeout=30 * sut.SLOWDOWN)
    assert p.returncode == 0, p.stderr.decode()
    assert b"test is successful" in p.stdout


def test_hand_written_rules_file_declares_its_count(tmp_path):
    rules = tmp_path / "rules.jsonl"
    rules.write_text('{"host":"site.example","patterns":["\\\\.png$"]}\n# checksum none hosts=1\n')
    k = Kosoku(tmp_path, rules_file=rules).start()
    try:
        assert k.api("GET", "/site.example")[2]["patterns"] == [r"\.png$"]
        assert k.cache_rule("/a.png") == ""
        assert k.api("PUT", "/other.example", {"patterns": []})[0] == 201
    finally:
        assert k.stop() == 0
    # The first write replaces it with kosoku's own trailer; the hand-written file is kept as .prev.
    assert re.fullmatch(r"# checksum fnv1a64=[0-9a-f]{16} hosts=2", rules.read_text().splitlines()[-1])
    assert Path(str(rules) + ".prev").read_text().endswith("# checksum none hosts=1\n")
