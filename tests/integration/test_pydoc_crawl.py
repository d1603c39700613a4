"""Serve Debian's python3.11-doc HTML tree with the SUT and with a reference nginx (equivalent configs, both
started here on their own ports), crawl both with wget, fetch every file by path, and compare.

Checks:
  * every file of the tree, fetched by its percent-encoded path over keep-alive connections, is byte-identical
    to the file on disk (the two symlinks that point out of the tree are followed, as nginx does);
  * wget's mirror of each server is byte-identical to the tree, and both mirrors hold the same files;
  * the set of URLs that answered 404 during the SUT's crawl equals the set from nginx's crawl, and every 404
    is a link to a file the package does not ship.
Bounded: each crawl has a 240 s limit (both run in parallel, ~67 MB each).
"""
from __future__ import annotations

import http.client
import os
import re
import subprocess
import time
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest

import sut

PYDOC = Path(os.environ.get("PYDOC_ROOT", "/usr/share/doc/python3.11/html"))
CRAWL_TIMEOUT_S = 240


def _http_body(port: int) -> str:
    return f"""
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port} default_server;
        server_name _;
        root {PYDOC};
        index index.html;
    }}
"""


@pytest.fixture(scope="module")
def pydoc_servers(tmp_path_factory):
    if not (PYDOC / "index.html").is_file():
        pytest.fail(f"{PYDOC} missing: install python3.11-doc (listed in .ci/deps.sh)")
    base = tmp_path_factory.mktemp("pydoc")
    os.chmod(base, 0o755)
    p_sut, p_ref = sut.free_ports(2)
    servers = {
        "sut": sut.ServerProcess(sut.SUT, base / "sut", _http_body(p_sut), [p_sut]),
        "nginx": sut.ServerProcess("nginx", base / "ref", _http_body(p_ref), [p_ref]),
    }
    started = []
    try:
        for s in servers.values():
            s.start()
            started.append(s)
        yield {"base": base, "servers": servers, "ports": {"sut": p_sut, "nginx": p_ref}}
    finally:
        for s in started:
            alive = s.alive()
            rc = s.stop()
            assert alive, f"{s.kind} died during the pydoc tests\n" + s.diagnostics()
            if s.kind == "kosoku":
                assert rc == 0, f"kosoku exited with {rc} after SIGTERM\n" + s.diagnostics()


def tree_files() -> list[str]:
    """Every file of the tree (symlinks to files included), as '/'-separated paths relative to the root."""
    out = []
    for dirpath, _dirs, files in os.walk(PYDOC):
        for f in files:
            full = Path(dirpath) / f
            if full.is_file():  # follows symlinks; skips dangling ones
                out.append(full.relative_to(PYDOC).as_posix())
    return sorted(out)


def url_path(rel: str) -> str:
    return "/" + quote(rel, safe="/")  # percent-encodes spaces, non-ASCII, %, ?, #, ...


@pytest.mark.parametrize("which", ["sut", "nginx"])
def test_fetch_every_file_by_path(pydoc_servers, which):
    port = pydoc_servers["ports"][which]
    files = tree_files()
    assert len(files) > 500, f"suspiciously small tree: {len(files)} files"
    symlinks_out = [f for f in files if (PYDOC / f).is_symlink()
                    and not Path(os.path.realpath(PYDOC / f)).is_relative_to(PYDOC)]
    assert symlinks_out, "expected the package's symlinks that point out of the tree (jquery.js, underscore.js)"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    mismatches: list[str] = []
    connections = 0
    t0 = time.monotonic()
    try:
        for rel in files:
            if conn.sock is None:
                connections += 1
            conn.request("GET", url_path(rel))
            resp = conn.getresponse()
            body = resp.read()
            expected = (PYDOC / rel).read_bytes()
            if resp.status != 200 or body != expected:
                mismatches.append(f"{url_path(rel)}: status {resp.status}, {len(body)} bytes, "
                                  f"expected 200 and {len(expected)} bytes")
            elif resp.getheader("Content-Length") not in (None, str(len(expected))):
                mismatches.append(f"{url_path(rel)}: Content-Length {resp.getheader('Content-Length')}")
    finally:
        conn.close()
    assert not mismatches, f"{len(mismatches)} of {len(files)} files differ; first: {mismatches[:10]}"
    # keep-alive must have been used: far fewer connections than requests
    assert connections <= len(files) // 50 + 2, f"{connections} connections for {len(files)} requests"
    print(f"{which}: {len(files)} files in {time.monotonic() - t0:.1f}s over {connections} connections")


_ERR_RE = re.compile(r"ERROR (\d{3}):")


def parse_wget_errors(log: str) -> dict[str, int]:
    """wget --no-verbose prints a failed URL as 'URL:' on one line and '<date> ERROR 404: Not Found.' on the
    next. Returns {path?query: status}."""
    out: dict[str, int] = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        m = _ERR_RE.search(line)
        if m and i > 0 and lines[i - 1].startswith("http://") and lines[i - 1].endswith(":"):
            u = urlsplit(lines[i - 1][:-1])
            out[u.path + ("?" + u.query if u.query else "")] = int(m.group(1))
    return out


def mirrored_files(root: Path) -> dict[str, Path]:
    """wget's saved files, keyed by tree-relative path (a saved 'name?query' maps to 'name')."""
    out = {}
    for p in root.rglob("*"):
        if p.is_file():
            rel = p.relative_to(root).as_posix()
            out.setdefault(rel.split("?", 1)[0], p)
    return out


def test_wget_mirror_matches_nginx(pydoc_servers):
    base: Path = pydoc_servers["base"]
    procs = {}
    for which, port in pydoc_servers["ports"].items():
        dest = base / f"mirror-{which}"
        log = base / f"wget-{which}.log"
        procs[which] = (subprocess.Popen(
            ["wget", "--mirror", "-e", "robots=off", "--no-verbose", "-nH", "-P", str(dest),
             "--tries=1", "--timeout=20", "-o", str(log), f"http://127.0.0.1:{port}/"],
            stdin=subprocess.DEVNULL), dest, log)
    results = {}
    deadline = time.monotonic() + CRAWL_TIMEOUT_S
    for which, (proc, dest, log) in procs.items():
        try:
            rc = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p, _, _ in procs.values():
                p.kill()
            pytest.fail(f"wget crawl of {which} exceeded {CRAWL_TIMEOUT_S}s")
        # wget exits 8 when the server answered some request with an error (the 404s below); others are faults.
        text = log.read_text(errors="replace")
        assert rc in (0, 8), f"wget {which} exit {rc}\n{text[-3000:]}"
        results[which] = (parse_wget_errors(text), mirrored_files(dest), text)

    err_sut, files_sut, log_sut = results["sut"]
    err_ref, files_ref, _ = results["nginx"]
    assert len(files_ref) > 500, f"nginx crawl found only {len(files_ref)} files"

    # Only 404s, and the same ones.
    assert set(err_sut.values()) <= {404}, f"non-404 errors from the SUT: {[u for u, s in err_sut.items() if s != 404][:20]}"
    assert set(err_sut) == set(err_ref), (f"404 sets differ. only SUT: {sorted(set(err_sut) - set(err_ref))[:20]} "
                                          f"only nginx: {sorted(set(err_ref) - set(err_sut))[:20]}")
    # Each 404 is a link to something the package does not ship.
    for u in err_sut:
        rel = unquote(u.split("?", 1)[0]).lstrip("/")
        assert not (PYDOC / rel).is_file(), f"404 for {u}, but {PYDOC / rel} exists"

    # Both mirrors hold the same files, and each file equals the tree's.
    assert set(files_sut) == set(files_ref), (f"mirrors differ. only SUT: {sorted(set(files_sut) - set(files_ref))[:20]} "
                                              f"only nginx: {sorted(set(files_ref) - set(files_sut))[:20]}")
    for link in ("_static/jquery.js", "_static/underscore.js"):
        if (PYDOC / link).is_symlink():
            assert link in files_sut, f"{link} (a symlink out of the tree) was not served to the crawler"
    bad = []
    for rel, p in files_sut.items():
        src = PYDOC / rel
        if not src.is_file() or p.read_bytes() != src.read_bytes():
            bad.append(rel)
    assert not bad, f"{len(bad)} mirrored files differ from the tree: {bad[:20]}"
    print(f"crawl: {len(files_sut)} files, {len(err_sut)} 404s: {sorted(err_sut)[:10]}")
