"""The proxy cache on a failing disk, with real file systems: a small tmpfs that fills up during a cache fill
(ENOSPC) and a tmpfs remounted read-only (EROFS) under a purge, each followed by a restart of kosoku.

- ENOSPC: the client still gets the whole response byte for byte, the fill is abandoned with
  `not storing "KEY": write() "PATH" failed (28: No space left on device)`, no temp file or partial entry is
  left behind, the space comes back, smaller entries are cached afterwards, and a restart loads nothing corrupt.
- EROFS: `PURGE` answers 500 with `open() "PATH/purge.N.log" failed (30: Read-only file system)` in the error
  log (one line even for a wildcard over several entries): a purge whose record cannot be written purges
  nothing, so the entries stay cached, and the same holds after a restart; once the file system is writable
  again the purge answers 200 and the entry stays gone after another restart.
- A purge whose unlink fails after the answer (a read-only level directory) stays purged after a SIGKILL and a
  restart: the loader finds the file covered by the purge log and removes it.

These need root (mount -t tmpfs, mount -o remount,ro) and skip with the reason otherwise. kosoku only.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

import sut
from test_cache import Origin, Reply, fixed, prefix

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's proxy cache and proxy_cache_purge")

HOST = "disk.example"


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=20)


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a tmpfs (mount -t tmpfs) for a real ENOSPC/EROFS cache directory")
    path.mkdir(parents=True, exist_ok=True)
    r = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {r.stderr.strip() or r.returncode}")
    try:
        yield path
    finally:
        _run("umount", "-l", str(path))


def remount(path: Path, mode: str) -> None:
    r = _run("mount", "-o", f"remount,{mode}", str(path))
    if r.returncode != 0:
        pytest.skip(f"mount -o remount,{mode} is not permitted here: {r.stderr.strip() or r.returncode}")


def cache_config(port: int, origin_port: int, cache_dir: Path) -> str:
    return f"""
    proxy_cache_path {cache_dir} levels=1:2 keys_zone=disk:1m inactive=10m use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{origin_port}; keepalive 4; }}
    server {{
        listen 127.0.0.1:{port};
        server_name {HOST};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_cache disk;
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
    }}
"""


def entry_file(cache_dir: Path, key: str) -> Path:
    """nginx's file name for `key` with levels=1:2 (core/cache/cache_key.hh)."""
    h = hashlib.md5(key.encode()).hexdigest()
    return cache_dir / h[-1] / h[-3:-1] / h


def files_under(d: Path) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file())


def start(workdir: Path, origin: Origin, cache_dir: Path) -> tuple[sut.ServerProcess, int]:
    port = sut.free_port()
    log = workdir / "error.log"
    loaded_before = log.read_text(errors="replace").count("http file cache:") if log.exists() else 0
    s = sut.ServerProcess(sut.SUT, workdir, cache_config(port, origin.port, cache_dir), [port]).start()
    deadline = time.monotonic() + 5
    while s.error_log().count("http file cache:") == loaded_before and time.monotonic() < deadline:
        time.sleep(0.05)  # this start's cache loader line: purges answer 503 until the loader has run
    return s, port


def get(port: int, target: str, method: str = "GET") -> sut.Response:
    return sut.request(port, method, target, host=HOST, timeout=20)


def test_fill_on_a_full_disk_is_abandoned_and_the_response_is_intact(tmp_path):
    origin = Origin()
    big = os.urandom(3 * 1024 * 1024)  # three times the file system
    small = os.urandom(16 * 1024)
    p = prefix()
    origin.route(p + "/big", fixed(big))
    origin.route(p + "/small", fixed(small))
    with tmpfs(tmp_path / "mnt", "1m") as mnt:
        cache_dir = mnt / "cache"
        cache_dir.mkdir()
        s, port = start(tmp_path / "run", origin, cache_dir)
        try:
            t0 = time.monotonic()
            for n in (1, 2):  # twice: nothing of the first attempt may make the second a wrong HIT
                r = get(port, p + "/big")
                assert r.status == 200 and r.header("Content-Length") == str(len(big))
                assert hashlib.sha256(r.body).hexdigest() == hashlib.sha256(big).hexdigest()
                assert origin.count(p + "/big") == n  # not cached: every request goes to the origin
            assert time.monotonic() - t0 < 20
            key = f"http:{HOST}{p}/big"
            deadline = time.monotonic() + 5
            while files_under(cache_dir) and time.monotonic() < deadline:
                time.sleep(0.05)  # the abandoned temp file is unlinked after the failed write completes
            assert files_under(cache_dir) == []  # no temp file, no partial entry
            log = s.error_log()
            assert f'not storing "{key}": write() "' in log, log[-2000:]
            assert "failed (28: No space left on device)" in log
            st = os.statvfs(mnt)
            assert st.f_bfree * st.f_frsize >= 900 * 1024  # the space came back
            # The cache still works for what fits.
            assert get(port, p + "/small").body == small
            assert get(port, p + "/small").body == small
            assert origin.count(p + "/small") == 1
            assert entry_file(cache_dir, f"http:{HOST}{p}/small").is_file()
        finally:
            assert s.stop() == 0
        # A restart finds nothing to repair and keeps the complete entry.
        s, port = start(tmp_path / "run", origin, cache_dir)
        try:
            assert get(port, p + "/small").body == small
            assert origin.count(p + "/small") == 1
            assert get(port, p + "/big").body == big
            assert origin.count(p + "/big") == 3
            log = s.error_log()
            assert "is invalid" not in log, log[-2000:]
            assert "1 entries loaded, 0 files removed" in log, log[-2000:]
        finally:
            assert s.stop() == 0
    origin.stop()


def test_purge_on_a_read_only_cache_reports_failure_and_keeps_the_entry(tmp_path):
    origin = Origin()
    p = prefix()
    one, wild = p + "/one", [f"/w{p}/{i}" for i in range(3)]
    for t in [one] + wild:
        origin.route(t, fixed(t.encode()))
    with tmpfs(tmp_path / "mnt", "8m") as mnt:
        cache_dir = mnt / "cache"
        cache_dir.mkdir()
        s, port = start(tmp_path / "run", origin, cache_dir)
        restarted = None
        try:
            for t in [one] + wild:
                assert get(port, t).status == 200
                assert get(port, t).status == 200
                assert origin.count(t) == 1
            f = entry_file(cache_dir, f"http:{HOST}{one}")
            assert f.is_file()
            remount(mnt, "ro")

            # The purge's record cannot be written: nothing is purged, and the answer says so.
            r = get(port, one, method="PURGE")
            assert r.status == 500, r
            assert b"Purge failed" in r.body and b"Read-only file system" in r.body
            assert re.search(r'open\(\) "[^"]*/purge\.\d+\.log" failed \(30: Read-only file system\)', s.error_log())
            assert f.is_file()
            assert get(port, one).body == one.encode() and origin.count(one) == 1  # still cached: a HIT
            # A wildcard likewise: one log line, every entry kept.
            lines_before = s.error_log().count("(30: Read-only file system)")
            r = get(port, f"/w{p}/*", method="PURGE")
            assert r.status == 500, r
            assert s.error_log().count("(30: Read-only file system)") == lines_before + 1
            for t in wild:
                assert get(port, t).status == 200 and origin.count(t) == 1
            assert s.stop() == 0

            # A restart on the still read-only cache: the entries are there, as the purge's answer said.
            restarted, port = start(tmp_path / "run", origin, cache_dir)
            assert get(port, one).body == one.encode() and origin.count(one) == 1
            assert get(port, one, method="PURGE").status == 500

            remount(mnt, "rw")
            r = get(port, one, method="PURGE")
            assert r.status == 200 and b"Entries: 1" in r.body
            deadline = time.monotonic() + 5
            while f.exists():  # the files go after the answer
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert get(port, f"/w{p}/*", method="PURGE").status == 200
            assert restarted.stop() == 0
            restarted = None

            # Gone for good: another restart does not bring them back.
            restarted, port = start(tmp_path / "run", origin, cache_dir)
            assert get(port, one).status == 200 and origin.count(one) == 2
            for t in wild:
                assert get(port, t).status == 200 and origin.count(t) == 2
        finally:
            _run("mount", "-o", "remount,rw", str(mnt))
            if s.alive():
                s.stop()
            if restarted is not None:
                assert restarted.stop() == 0
    origin.stop()


def test_a_purge_whose_unlink_fails_is_answered_and_stays_purged_after_a_crash(tmp_path):
    # The entry's level directory is a tmpfs of its own, remounted read-only after the fill: the purge's record
    # goes to the (writable) cache directory, the entry leaves the keys zone and the purge answers 200; the
    # unlink that follows fails. kosoku is then killed (SIGKILL) with the file still on disk; the next start's
    # loader must not bring it back (the purge log covers it) and removes the file.
    origin = Origin()
    one = prefix() + "/crash"
    origin.route(one, fixed(one.encode()))
    with tmpfs(tmp_path / "mnt", "8m") as mnt:
        cache_dir = mnt / "cache"
        f = entry_file(cache_dir, f"http:{HOST}{one}")
        f.parent.mkdir(parents=True)
        with tmpfs(f.parent, "1m") as level:
            s, port = start(tmp_path / "run", origin, cache_dir)
            restarted = None
            try:
                assert get(port, one).status == 200
                assert get(port, one).status == 200 and origin.count(one) == 1
                assert f.is_file()
                remount(level, "ro")
                r = get(port, one, method="PURGE")
                assert r.status == 200 and b"Entries: 1" in r.body, r
                deadline = time.monotonic() + 5
                while f'unlink() "{f}" failed (30: Read-only file system)' not in s.error_log():
                    assert time.monotonic() < deadline, s.error_log()
                    time.sleep(0.05)
                assert f.is_file()
                assert get(port, one).status == 200 and origin.count(one) == 2  # purged: a miss
                s.kill()

                remount(level, "rw")
                restarted, port = start(tmp_path / "run", origin, cache_dir)
                assert get(port, one).status == 200 and origin.count(one) == 3  # not loaded again
                assert "files removed" in restarted.error_log()
            finally:
                _run("mount", "-o", "remount,rw", str(level))
                if s.alive():
                    s.kill()
                if restarted is not None:
                    assert restarted.stop() == 0
    origin.stop()
