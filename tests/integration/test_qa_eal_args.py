"""QA: `kosoku -t` must refuse a net_tap/net_tun interface name that Linux refuses, with FILE:LINE:COL.

README: "`kosoku -t` checks the `eal` arguments (... `--vdev` drivers ...) and reports FILE:LINE:COL of the
offending argument". The iface= (and remote=) check only looked at the length (1..15 bytes), so names with a
space, '/', ':' or the names "." and ".." passed `-t` and then failed at start ("TAP invalid remote interface
name (qa x)", "Unable to create TAP interface"). Linux's rule (net/core/dev.c dev_valid_name): 1..15 bytes, not
"." or "..", no '/', ':' or white space. Valid names (including the appliance's configuration) still pass.

Likewise `-l 0 --main-lcore=5` passed `-t` and EAL refused it at start ("EAL: Main lcore is not enabled for DPDK",
after printing its whole usage text): the main lcore must be one of the lcores -l/-c/--lcores set (or, without
them, a CPU the process may run on).

Runs only `kosoku -t` (no DPDK start, no root needed).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import sut

pytestmark = pytest.mark.skipif(sut.SUT != "kosoku", reason="kosoku's dpdk block")

CONF = """worker_processes 1;
network dpdk;
dpdk {{
    eal -l 0 --in-memory "--vdev=net_tap0,{kv}";
    address 10.98.0.2/24;
}}
http {{ server {{ listen 8099; }} }}
"""
COL = len('    eal -l 0 --in-memory "') + 1  # the --vdev argument's column (the quote) on line 4


def check(tmp_path: Path, kv: str, eal: str | None = None) -> subprocess.CompletedProcess:
    conf = tmp_path / "t.conf"
    text = CONF.format(kv=kv)
    if eal is not None:
        text = text.replace(f'-l 0 --in-memory "--vdev=net_tap0,{kv}"', eal)
    conf.write_text(text)
    return subprocess.run([sut.kosoku_bin(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("kv", ["iface=qa x", "iface=qa/x", "iface=qa:x", "iface=.", "iface=..", "iface=a\tb",
                                "remote=et h0", "iface=abcdefghijklmnop", "iface="])
def test_invalid_interface_names_are_refused(tmp_path, kv):
    r = check(tmp_path, kv)
    assert r.returncode == 1, (kv, r.stdout, r.stderr)
    assert f"t.conf:4:{COL - 1}:" in r.stderr or f"t.conf:4:{COL}:" in r.stderr, r.stderr
    assert "is not a Linux interface name" in r.stderr, r.stderr


@pytest.mark.parametrize("kv", ["iface=qatap0", "iface=a-b_c.d", "iface=abcdefghijklmno", "iface=...", "remote=eth0",
                                "iface=dopt1,remote=lo"])
def test_valid_interface_names_pass(tmp_path, kv):
    r = check(tmp_path, kv)
    assert r.returncode == 0, (kv, r.stdout, r.stderr)


@pytest.mark.parametrize("eal, col", [("-l 0 --main-lcore=5", 14), ("--main-lcore=1 -c 0x1", 9),
                                      ("--lcores=0@1 --main-lcore 1", 35), ("-l 0-1 --main-lcore=7", 16)])
def test_main_lcore_outside_the_lcore_set_is_refused(tmp_path, eal, col):
    r = check(tmp_path, "iface=qa0", eal=eal)
    assert r.returncode == 1, (eal, r.stderr)
    assert f"t.conf:4:{col}: \"eal\": --main-lcore " in r.stderr, r.stderr
    assert "is not one of the EAL lcores" in r.stderr, r.stderr


@pytest.mark.parametrize("eal", ["-l 0-1 --main-lcore=1", "--main-lcore 1 -c 0x3", "--lcores=(0-1)@0 --main-lcore=1",
                                 "--main-lcore=0"])
def test_main_lcore_inside_the_lcore_set_passes(tmp_path, eal):
    r = check(tmp_path, "iface=qa0", eal=eal)
    assert r.returncode == 0, (eal, r.stderr)


def test_appliance_configuration_passes():
    conf = sut.REPO / "conf" / "appliance.conf"
    r = subprocess.run([sut.kosoku_bin(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
