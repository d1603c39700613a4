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

import shutil
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
    (tmp_path / "logs").mkdir(exist_ok=True)  # -t opens the default error log (logs/error.log) as the start does
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


def test_appliance_configuration_passes(tmp_path):
    # A copy of conf/ with the default TLS pair the image build generates when it is absent.
    shutil.copytree(sut.REPO / "conf", tmp_path / "conf")
    (tmp_path / "conf" / "tls").mkdir(exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(tmp_path / "conf/tls/default.key"), "-out", str(tmp_path / "conf/tls/default.crt"),
                    "-days", "2", "-subj", "/CN=kosoku"], check=True, capture_output=True)
    conf = tmp_path / "conf" / "appliance.conf"
    r = subprocess.run([sut.kosoku_bin(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


# rte_eal_init parses its arguments with getopt_long, which takes a unique prefix of a long option for the option
# (checked against Debian's DPDK 22.11: each of these starts the EAL) and refuses a prefix of several.
@pytest.mark.parametrize("eal", ["-l 0 --no-hu --no-shc --no-pc --no-te --log-l=notice",
                                 "-l 0 --in-mem --main-l 0 --iova=va --vd=net_tap0,iface=qa0",
                                 "--lc=0@0 --file-p qa-eal --socket-m=64 --trace=eal --huge-u=always"])
def test_unique_prefixes_of_long_options_pass(tmp_path, eal):
    r = check(tmp_path, "iface=qa0", eal=eal)
    assert r.returncode == 0, (eal, r.stderr)


@pytest.mark.parametrize("eal, col, message", [
    ("-l 0 --no-h", 14, 'ambiguous EAL option "--no-h" (possibilities: --no-hpet --no-huge; DPDK 22.11)'),
    ("-l 0 --tr=eal", 14, 'ambiguous EAL option "--tr" (possibilities: --trace --trace-bufsz --trace-dir '
                          '--trace-mode; DPDK 22.11)'),
    ("-l 0 --vd=net_pcap0", 14, 'invalid value of EAL option "--vdev": --vdev "net_pcap0" names no driver'),
    ("-l 0 --no-hu=1", 14, 'EAL option "--no-huge" takes no value'),
])
def test_ambiguous_or_wrong_prefixes_are_refused(tmp_path, eal, col, message):
    r = check(tmp_path, "iface=qa0", eal=eal)
    assert r.returncode == 1, (eal, r.stderr)
    assert f"t.conf:4:{col}: \"eal\": {message}" in r.stderr, r.stderr


# `idle_sleep N` (dpdk block): a bare number is milliseconds, as nginx reads its msec-valued directives.
@pytest.mark.parametrize("value, ok", [("1", True), ("10", True), ("250us", True), ("2ms", True), ("off", True),
                                       ("11", False), ("0", False), ("1s", False)])
def test_idle_sleep_takes_a_bare_number_as_milliseconds(tmp_path, value, ok):
    conf = tmp_path / "t.conf"
    (tmp_path / "logs").mkdir(exist_ok=True)
    conf.write_text(CONF.format(kv="iface=qa0").replace("    address", f"    idle_sleep {value};\n    address"))
    r = subprocess.run([sut.kosoku_bin(), "-t", "-c", str(conf)], capture_output=True, text=True, timeout=30)
    assert (r.returncode == 0) == ok, (value, r.stderr)
    if not ok:
        assert f't.conf:5:16: invalid value "{value}" in "idle_sleep" directive' in r.stderr, r.stderr
