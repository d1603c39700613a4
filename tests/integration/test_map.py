"""The map directive (ngx_http_map_module) end to end: one nginx-syntax config with several maps, their
variables used in `return`, `add_header`, `log_format` and `proxy_set_header`, exact responses checked.

- exact strings (case-insensitive) before regexes, regexes in file order, `~*` case-insensitive, the default
  (empty unless given), `\\default` as a literal source value;
- `hostnames`: `*.example.com`, `.example.org`, `www.example.*`, longest mask first, trailing dot dropped;
- values with variables and regex captures ($1), a source built of two variables, a map of a map's variable, `include` inside the block;
- a second map for the same variable replaces the first; regexes never run on an empty source;
- `-t` refuses a duplicate `default` with nginx's words.

The same tests run against nginx (SUT=nginx).
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import sut


class HeaderEchoOrigin(sut.ScriptedOrigin):
    """Answers every request with 200 and, as body, the value of its X-Map field."""

    def serve(self, c: socket.socket) -> None:
        try:
            buf = sut.recv_request_head(c)
            if buf is None:
                return
            body = b"<none>"
            for line in buf.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"x-map":
                    body = value.strip()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        except OSError:
            pass


@dataclass
class Env:
    port: int
    server: sut.ServerProcess
    access_log: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    work = tmp_path_factory.mktemp("map")
    work.chmod(0o755)
    (work / "entries.map").write_text("/included included;\n~^/inc-re/ included-regex;\n")
    origin = HeaderEchoOrigin()
    port = sut.free_port()
    conf = f"""
    map $http_host $mt_host {{
        hostnames;
        default none;
        example.com exact;
        *.example.com star;
        *.a.example.com deeper;
        .example.org dot;
        www.example.* tail;
        www.example.co.* tail-longer;
        ~^www\\. regex;
    }}
    map $uri $mt_uri {{
        default "d-$host";
        /exact exact;
        /MiXeD mixed;
        ~^/re/(a|b) first;
        ~^/re/ second;
        ~*\\.JPG$ image;
        include {work}/entries.map;
    }}
    map $http_host$uri $mt_complex {{
        h.example/p hp;
        default "[$http_host$uri]";
    }}
    map $mt_uri $mt_nested {{
        d-n.example "nested-$mt_uri";
        default no;
    }}
    map $arg_q $mt_empty {{
        \\default literal-default;
        ~^$ regex-on-empty;
        ~. any;
        default dflt;
    }}
    map $uri $mt_cap {{
        ~^/u/(\\w+)/(\\d+)$ "user=$1,id=$2,host=$host";
        default "none[$1]";
    }}
    map $uri $mt_nodefault {{
        /x x;
    }}
    map $uri $mt_twice {{ default one; }}
    map $uri $mt_twice {{ default two; }}
    log_format mapfmt 'map|$uri|$mt_uri|$mt_host';
    server {{
        listen 127.0.0.1:{port} default_server;
        access_log {work}/map-access.log mapfmt;
        location / {{
            add_header X-Host $mt_host always;
            return 200 "uri=$mt_uri complex=$mt_complex nested=$mt_nested empty=$mt_empty nodefault=[$mt_nodefault] cap=$mt_cap twice=$mt_twice\\n";
        }}
        location /proxy/ {{
            proxy_pass http://127.0.0.1:{origin.port};
            proxy_set_header X-Map "$mt_uri|$mt_host";
        }}
    }}
"""
    srv = sut.ServerProcess(sut.SUT, Path(work), conf, [port])
    srv.start()
    yield Env(port, srv, work / "map-access.log")
    srv.stop()
    origin.close()


def fields(env: Env, target: str, host: str = "h.example") -> tuple[dict[str, str], sut.Response]:
    r = sut.request(env.port, "GET", target, host=host)
    assert r.status == 200, r
    out = {}
    for part in r.body.decode().strip().split(" "):
        k, _, v = part.partition("=")
        out[k] = v
    return out, r


@pytest.mark.parametrize("target,want", [
    ("/exact", "exact"),
    ("/EXACT", "exact"),              # exact strings match ignoring case
    ("/mixed", "mixed"),
    ("/re/a", "first"),               # the first regex in file order that matches
    ("/re/c", "second"),
    ("/x/pic.jpg", "image"),          # ~* is case-insensitive
    ("/x/pic.JpG", "image"),
    ("/included", "included"),        # entries from `include`
    ("/inc-re/z", "included-regex"),
    ("/nothing", "d-h.example"),      # the default's variables are expanded
])
def test_source_matching(env, target, want):
    f, _ = fields(env, target)
    assert f["uri"] == want


@pytest.mark.parametrize("host,want", [
    ("example.com", "exact"),
    ("EXAMPLE.com.", "exact"),          # lower-cased, one trailing dot dropped
    ("x.example.com", "star"),
    ("y.x.example.com", "star"),
    ("a.example.com", "star"),          # `*.a.example.com` needs a label before a.example.com
    ("b.a.example.com", "deeper"),      # the longest mask wins
    ("example.org", "dot"),             # `.example.org` covers the name itself
    ("w.example.org", "dot"),
    ("www.example.net", "tail"),
    ("www.example.co.uk", "tail-longer"),
    ("www.example", "regex"),           # `www.example.*` needs a label after it
    ("other.net", "none"),
])
def test_hostnames(env, host, want):
    _, r = fields(env, "/", host=host)
    assert r.header("X-Host") == want


def test_templates_nesting_and_defaults(env):
    f, _ = fields(env, "/p")
    assert f["complex"] == "hp"
    f, _ = fields(env, "/q?q=1")
    assert f == {"uri": "d-h.example", "complex": "[h.example/q]", "nested": "no", "empty": "any",
                 "nodefault": "[]", "cap": "none[]", "twice": "two"}
    f, _ = fields(env, "/u/bob/42")
    assert f["cap"] == "user=bob,id=42,host=h.example"  # a value with its regex's captures
    f, _ = fields(env, "/zz", host="n.example")
    assert f["nested"] == "nested-d-n.example"  # a map of another map's variable
    assert f["empty"] == "dflt"                 # regexes never run on an empty source, `~^$` included
    f, _ = fields(env, "/?q=default")
    assert f["empty"] == "literal-default"      # `\\default` is the source value "default"


def test_proxy_set_header(env):
    r = sut.request(env.port, "GET", "/proxy/x.JPG", host="www.example.de")
    assert r.status == 200, r
    assert r.body == b"image|tail"


def test_access_log(env):
    r = sut.request(env.port, "GET", "/re/b?logged", host="w.example.org")
    assert r.status == 200
    want = "map|/re/b|first|dot"
    deadline = time.monotonic() + 5
    lines: list[str] = []
    while time.monotonic() < deadline:
        if env.access_log.exists():
            lines = [ln for ln in env.access_log.read_text(errors="replace").splitlines() if ln.startswith("map|/re/b|")]
            if lines:
                break
        time.sleep(0.1)
    assert lines == [want]


def test_config_errors(tmp_path):
    bad = sut.ServerProcess(sut.SUT, tmp_path / "dup", "    map $uri $mt_bad { default 1; default 2; }\n", [])
    res = bad.check_config()
    msg = (res.stderr + res.stdout).decode(errors="replace")
    assert res.returncode != 0
    assert "duplicate default map parameter" in msg and str(bad.conf_path) in msg, msg
    bad = sut.ServerProcess(sut.SUT, tmp_path / "args", "    map $uri $mt_bad2 { a 1 2; }\n", [])
    res = bad.check_config()
    msg = (res.stderr + res.stdout).decode(errors="replace")
    assert res.returncode != 0
    assert "invalid number of the map parameters" in msg, msg


def test_pcre_only_regex_is_a_config_error(tmp_path):
    """kosoku's regexes are RE2: nginx's PCRE-only syntax (lookahead) is refused at load with file:line:col."""
    if sut.SUT != "kosoku":
        pytest.skip("nginx (PCRE) accepts lookahead")
    bad = sut.ServerProcess(sut.SUT, tmp_path / "re", "    map $uri $mt_bad3 {\n        ~^/(?=a) 1;\n    }\n", [])
    res = bad.check_config()
    msg = (res.stderr + res.stdout).decode(errors="replace")
    assert res.returncode != 0
    line = bad.conf_text.splitlines().index("        ~^/(?=a) 1;") + 1
    assert f'{bad.conf_path}:{line}:9: invalid regular expression "^/(?=a)": invalid perl operator: (?=' in msg, msg
