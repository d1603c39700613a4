"""kosoku-loadgen (bench/loadgen) against the real kosoku binary, both on DPDK over net_memif: no kernel on the
data path of either side (issue 4, "Benchmarks").

kosoku runs `network dpdk` with `--vdev=net_memif0,role=server,socket=<tmp>/memif.sock` (EAL --no-huge --no-shconf,
its own --file-prefix); kosoku-loadgen is the memif client with kosoku's own TCP stack as the HTTP client. The
loadgen runs ~2 s of keep-alive 1 KiB GETs and checks every body byte for byte against the file; the test asserts
a non-zero count of correct responses and zero errors of any kind, and that kosoku still serves afterwards.

Skips with a clear reason when the loadgen binary is not built or when DPDK cannot start a memif port here
(EAL or memif probe failure in kosoku's output).
"""
from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("KOSOKU_BIN", ROOT / "build/release/kosoku"))
LOADGEN = Path(os.environ.get("KOSOKU_LOADGEN", BIN.parent / "kosoku-loadgen"))
EAL = ["--no-huge", "--no-shconf", "--no-pci", "--no-telemetry", "--log-level=notice"]
SERVER_IP, CLIENT_IP, PORT = "10.78.0.1", "10.78.0.2", 8080

pytestmark = pytest.mark.skipif(
    not BIN.exists() or not LOADGEN.exists(),
    reason=f"kosoku ({BIN}) or kosoku-loadgen ({LOADGEN}) not built (ninja kosoku kosoku-loadgen; "
           "set KOSOKU_BIN / KOSOKU_LOADGEN)")

MEMIF_FAILURES = ("rte_eal_init failed", "no DPDK port", "Failed to create memif", "memif_socket_create")


@pytest.fixture
def memif_kosoku(tmp_path: Path):
    www = tmp_path / "www"
    www.mkdir()
    body = random.Random(4).randbytes(1024)
    (www / "1k.bin").write_bytes(body)
    sock = tmp_path / "memif.sock"
    eal = " ".join(["-l 0"] + EAL + [f"--file-prefix kosoku-itest-{os.getpid()}",
                                     f"--vdev=net_memif0,role=server,socket={sock},socket-abstract=no"])
    conf = tmp_path / "kosoku.conf"
    conf.write_text(f"""
worker_processes 1;
error_log {tmp_path}/error.log info;
network dpdk;
dpdk {{
    eal {eal};
    address {SERVER_IP}/24;
}}
http {{
    access_log off;
    keepalive_requests 1000000;
    server {{ listen {PORT}; root {www}; }}
}}
""")
    out = tmp_path / "kosoku.out"
    proc = subprocess.Popen([str(BIN), "-c", str(conf), "-p", f"{tmp_path}/"], stdout=open(out, "w"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while not sock.exists():
        text = out.read_text(errors="replace")
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            if any(f in text for f in MEMIF_FAILURES):
                pytest.skip(f"DPDK net_memif cannot start here: {text.strip()[-400:]}")
            raise AssertionError(f"kosoku did not open its memif socket:\n{text}")
        time.sleep(0.05)
    try:
        yield tmp_path, www / "1k.bin", proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_loadgen(base: Path, expect: Path, seconds: float, connections: int, pipeline: int = 1) -> dict:
    sock = base / "memif.sock"
    cmd = [str(LOADGEN), "--server", f"{SERVER_IP}:{PORT}", "--address", f"{CLIENT_IP}/24",
           "-c", str(connections), "--pipeline", str(pipeline), "-d", str(seconds), "--warmup", "0.3",
           "--path", "/1k.bin", "--expect-file", str(expect), "--json", "--",
           "-l", "0"] + EAL + [f"--file-prefix=kosoku-itest-lg-{os.getpid()}",
                               f"--vdev=net_memif0,role=client,socket={sock},socket-abstract=no"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    m = re.search(r"^LOADGEN_JSON (\{.*\})$", p.stdout, re.M)
    assert m, f"no loadgen summary (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    r = json.loads(m.group(1))
    r["exit"] = p.returncode
    r["output"] = p.stdout + p.stderr
    return r


def test_loadgen_over_memif_gets_correct_bodies(memif_kosoku):
    base, expect, proc = memif_kosoku
    r = run_loadgen(base, expect, seconds=2, connections=8)
    assert r["body_checked"] is True
    assert r["responses"] > 0, r["output"]
    assert r["body_bytes"] == r["responses"] * 1024
    assert r["errors"] == 0 and r["warmup_errors"] == 0, r["output"]
    assert r["exit"] == 0, r["output"]
    assert r["req_per_s"] > 0 and r["p50_us"] > 0
    assert proc.poll() is None, "kosoku died under load"


def test_loadgen_pipelined_then_again_on_the_same_server(memif_kosoku):
    # Pipelining (4 requests in flight per connection) and a second memif client session against the same
    # kosoku: the server's port reconnects, the old connections were reset, the new ones work.
    base, expect, proc = memif_kosoku
    first = run_loadgen(base, expect, seconds=1, connections=4, pipeline=4)
    assert first["responses"] > 0 and first["errors"] == 0, first["output"]
    second = run_loadgen(base, expect, seconds=1, connections=4)
    assert second["responses"] > 0 and second["errors"] == 0 and second["warmup_errors"] == 0, second["output"]
    assert proc.poll() is None
