"""Boot tests of the appliance image (issue 3): image/build-image, image/run-qemu, PID 1 and the serial console.

Each boot test builds nothing itself: the module fixture builds one image from a test config and a test site
into a temp dir, then each test boots it in QEMU (TCG here: ../shared/notes/appliance-recipe.md Trap 0) with
the serial console on a unix socket, and checks through QEMU's user-network port forward and the console:
  - GET / returns the site's index page (first HTTP 200 timed from QEMU's start);
  - `stats json` counts exactly the requests made;
  - `config` prints the SHA-256 of the host's config file and says it matches the flashed digest;
  - `poweroff` makes QEMU exit with status 0, after the data disk was unmounted.
It runs once with SeaBIOS and once with OVMF, both from the same hybrid disk. A broken config must fail
`make image` with kosoku's `file:line:col: message` and leave no image.

Environment:
  KOSOKU_BIN            the kosoku binary (default build/release/kosoku; must be static)
  APPLIANCE_KOSOKU_BIN  overrides KOSOKU_BIN for these tests only (e.g. a test init)
  APPLIANCE_BOOT_TIMEOUT  seconds to wait for the first HTTP 200 (default 240: TCG on a loaded 2-core host)
Only one QEMU runs at a time. Measurements (sizes, boot times) go to build/appliance-measurements.json.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "image"
BOOT_TIMEOUT = float(os.environ.get("APPLIANCE_BOOT_TIMEOUT", "240"))
PROMPT = b"kosoku> "
MEASUREMENTS = REPO / "build" / "appliance-measurements.json"


def kosoku_bin() -> Path:
    p = Path(os.environ.get("APPLIANCE_KOSOKU_BIN") or os.environ.get("KOSOKU_BIN") or "build/release/kosoku")
    return p if p.is_absolute() else REPO / p


def qemu_runs() -> str | None:
    """None if QEMU can run a TCG guest here, else why not."""
    exe = shutil.which("qemu-system-x86_64")
    if exe is None:
        return "qemu-system-x86_64 is not installed (make deps installs qemu-system-x86)"
    p = subprocess.run([exe, "--version"], capture_output=True, text=True)
    if p.returncode != 0:
        return f"qemu-system-x86_64 cannot run: {p.stderr.strip()}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(key: str, value) -> None:
    MEASUREMENTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(MEASUREMENTS.read_text()) if MEASUREMENTS.exists() else {}
    data[key] = value
    MEASUREMENTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


TEST_SITE_INDEX = b"<!DOCTYPE html>\n<title>kosoku appliance test</title>\n<p>appliance-boot-test-marker</p>\n"


def appliance_test_config(port: int = 80) -> str:
    return f"""# appliance boot test config (tests/integration/test_appliance.py)
worker_processes 2;
events {{
    worker_connections 1024;
}}
error_log stderr notice;
appliance {{
    address 10.0.2.15/24;
    gateway 10.0.2.2;
    interface eth0;
    data_disk /dev/vda ro fstype=ext4 mount=/data;
    console ttyS0 115200;
    on_fatal reboot;
}}
http {{
    types {{
        text/html html;
        text/plain txt;
    }}
    default_type application/octet-stream;
    access_log off;
    server {{
        listen {port} default_server;
        server_name _;
        root /data;
        index index.html;
    }}
}}
"""


@pytest.fixture(scope="module")
def built_image(tmp_path_factory):
    why = qemu_runs()
    if why:
        pytest.skip(why)
    kosoku = kosoku_bin()
    assert kosoku.is_file(), f"{kosoku} not found: run `make build` (or set APPLIANCE_KOSOKU_BIN)"
    # image/pid1.cc is linked in only when main() calls it: without it the image would panic at boot and
    # every test below would wait for its full timeout.
    if b"PID 1 on Linux " not in kosoku.read_bytes():
        pytest.fail(f"{kosoku} has no appliance PID-1 support: core/main.cc must call image/pid1.hh "
                    "(is_pid1, early_init, init_system, fatal, power_off) and start image/console.hh", pytrace=False)
    base = tmp_path_factory.mktemp("appliance")
    site = base / "site"
    (site / "sub").mkdir(parents=True)
    (site / "index.html").write_bytes(TEST_SITE_INDEX)
    (site / "sub" / "file.txt").write_bytes(b"a file in a subdirectory\n")
    conf = base / "appliance-test.conf"
    conf.write_text(appliance_test_config())
    out = base / "image"
    t0 = time.monotonic()
    p = subprocess.run([str(IMAGE / "build-image"), "--config", str(conf), "--site", str(site), "--out", str(out),
                        "--kosoku", str(kosoku)], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, f"build-image failed:\n{p.stdout}{p.stderr}"
    manifest = json.loads((out / "manifest.json").read_text())
    record("image_build_seconds", round(time.monotonic() - t0, 1))
    record("sizes_bytes", {**manifest["sizes"], "kosoku_stripped": manifest["kosoku_stripped_bytes"],
                           "modules": manifest["modules_bytes"], "initramfs_cpio": manifest["initramfs_cpio_bytes"]})
    return {"dir": out, "conf": conf, "manifest": manifest, "base": base}


class Serial:
    """The appliance's serial console through QEMU's unix-socket chardev."""

    def __init__(self, path: Path, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(str(path))
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.buf = b""

    def read_until(self, marker: bytes, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while marker not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError(f"no {marker!r} on the console within {timeout}s; got {self.buf[-2000:]!r}")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(f"console closed; got {self.buf[-2000:]!r}")
            self.buf += chunk
        out, _, self.buf = self.buf.partition(marker)
        return out

    def command(self, line: str, timeout: float = 30) -> str:
        """Sends `line` (LF-terminated: no echo) and returns the reply up to the next prompt."""
        self.buf = b""
        self.sock.sendall(line.encode() + b"\n")
        return self.read_until(b"\n" + PROMPT, timeout).replace(b"\r\n", b"\n").decode(errors="replace")

    def close(self) -> None:
        self.sock.close()


def http_get(port: int, path: str = "/", timeout: float = 5) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read()


def stats_json(serial: Serial) -> dict:
    reply = serial.command("stats json")
    return json.loads(reply[reply.index("{"): reply.rindex("}") + 1])


class Vm:
    def __init__(self, image: Path, workdir: Path, bios: str, tag: str = ""):
        self.port = free_port()
        # A unix socket path must fit in 108 bytes: keep it short, away from pytest's long tmp paths.
        self.sockdir = Path(tempfile.mkdtemp(prefix="kosoku-vm-"))
        self.sock = self.sockdir / "serial.sock"
        self.log = workdir / f"serial-{tag or bios}.log"
        self.log.unlink(missing_ok=True)
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [str(IMAGE / "run-qemu"), "--image", str(image), "--bios", bios, "--port", str(self.port),
             "--serial-socket", str(self.sock), "--serial-log", str(self.log), "--accel", "tcg"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def serial_text(self) -> str:
        return self.log.read_bytes().decode(errors="replace") if self.log.exists() else ""

    def diagnostics(self) -> str:
        qemu = ""
        if self.proc.poll() is not None and self.proc.stdout:
            qemu = self.proc.stdout.read().decode(errors="replace")
        return f"--- run-qemu (exit {self.proc.returncode}) ---\n{qemu}--- serial log ---\n{self.serial_text()[-6000:]}"

    def wait_boot(self) -> dict:
        """Polls until the first HTTP 200; returns the times (s since QEMU start) of the first serial byte,
        the first kosoku line and the first 200."""
        first_byte = first_line = None
        deadline = self.t0 + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"QEMU exited with {self.proc.returncode} during boot\n{self.diagnostics()}")
            text = self.serial_text()
            now = time.monotonic() - self.t0
            if first_byte is None and text:
                first_byte = now
            if first_line is None and "kosoku: " in text:
                first_line = now
            if "kosoku: network: " not in text:
                # Before eth0 is up, slirp would hold a connection and retry it for seconds: such a request
                # could reach the server long after its client gave up, and be counted behind our back.
                time.sleep(0.05)
                continue
            try:
                status, _ = http_get(self.port, timeout=30)
                if status == 200:
                    return {"first_serial_byte_s": round(first_byte or now, 2),
                            "first_kosoku_line_s": round(first_line or now, 2),
                            "first_http_200_s": round(now, 2)}
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"no HTTP 200 on 127.0.0.1:{self.port} within {BOOT_TIMEOUT}s\n{self.diagnostics()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.sockdir, ignore_errors=True)


@pytest.mark.parametrize("bios", ["seabios", "ovmf"])
def test_boot_serve_console_poweroff(built_image, tmp_path, bios):
    vm = Vm(built_image["dir"], tmp_path, bios)
    serial = None
    try:
        times = vm.wait_boot()
        status, body = http_get(vm.port, "/")
        assert status == 200 and body == TEST_SITE_INDEX
        status, body = http_get(vm.port, "/sub/file.txt")
        assert status == 200 and body == b"a file in a subdirectory\n"

        serial = Serial(vm.sock)
        serial.command("", timeout=30)  # an empty LF line: echo off, fresh prompt
        # A boot-time poll that timed out on our side may still be counted late by a slow TCG guest: start
        # from counters that stopped moving.
        before = stats_json(serial)
        for _ in range(20):
            time.sleep(1)
            again = stats_json(serial)
            if again["requests"] == before["requests"]:
                break
            before = again
        for _ in range(3):
            assert http_get(vm.port, "/")[0] == 200
        # Counters are plain per-core fields updated by the loops; allow a moment for the last response.
        deadline = time.monotonic() + 5
        while True:
            after = stats_json(serial)
            if after["requests"] >= before["requests"] + 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert after["requests"] == before["requests"] + 3, (before, after)
        assert after["responses"]["2xx"] == before["responses"]["2xx"] + 3, (before, after)
        assert sum(c["requests"] for c in after["cores"]) == after["requests"]

        host_sha = hashlib.sha256(built_image["conf"].read_bytes()).hexdigest()
        config = serial.command("config")
        assert f"sha256 {host_sha}" in config, config
        assert "matches the digest flashed by make image" in config, config
        assert "appliance-test.conf" not in config.splitlines()[0] and "/etc/kosoku.conf" in config
        assert "listen 80 default_server;" in config

        assert "unknown command" in serial.command("frobnicate")
        assert "eth0 10.0.2.15/24 via 10.0.2.2" in serial.command("version")
        assert "/dev/vda on /data (ext4, ro)" in serial.command("disk")
        assert "kosoku/" in serial.command("log 50") and "started: 2 worker(s)" in serial.command("log 50")

        if bios == "seabios" and shutil.which("wrk"):
            # The console has its own thread: it answers while the loops are busy with a load test.
            load = subprocess.Popen(["wrk", "-t", "2", "-c", "32", "-d", "6s", f"http://127.0.0.1:{vm.port}/"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(1)
            latencies = []
            while load.poll() is None:
                t = time.monotonic()
                assert serial.command("uptime", timeout=10).startswith("up ")
                latencies.append(time.monotonic() - t)
                time.sleep(0.2)
            wrk_out = load.stdout.read()
            m = re.search(r"(\d+) requests in", wrk_out)
            assert m and int(m.group(1)) > 0, wrk_out
            assert len(latencies) >= 3 and max(latencies) < 5, latencies
            assert stats_json(serial)["requests"] >= after["requests"] + int(m.group(1))
            times["console_reply_under_load_max_s"] = round(max(latencies), 3)
            times["wrk_requests_per_s_via_slirp"] = float(re.search(r"Requests/sec:\s+([\d.]+)", wrk_out).group(1))

        t_off = time.monotonic()
        serial.sock.sendall(b"poweroff\n")
        rc = vm.proc.wait(timeout=120)
        log = vm.serial_text()
        assert rc == 0, f"QEMU exited with {rc}\n{vm.diagnostics()}"
        assert "kosoku: data disk unmounted" in log, vm.diagnostics()
        times["poweroff_to_exit_s"] = round(time.monotonic() - t_off, 2)
        record(f"boot_tcg_{bios}", times)
    except BaseException:
        print(vm.diagnostics())
        raise
    finally:
        if serial:
            serial.close()
        vm.kill()


@pytest.mark.parametrize("on_fatal", ["reboot", "halt"])
def test_fatal_error_prints_reason_then_reboots_or_halts(built_image, tmp_path, on_fatal):
    # The data disk is ext4; asking for vfat makes the mount fail right after the modules are loaded.
    conf = tmp_path / "fatal.conf"
    conf.write_text(appliance_test_config().replace("fstype=ext4", "fstype=vfat")
                    .replace("on_fatal reboot;", f"on_fatal {on_fatal};"))
    out = tmp_path / "image"
    p = subprocess.run([str(IMAGE / "build-image"), "--config", str(conf), "--site", str(built_image["base"] / "site"),
                        "--out", str(out), "--kosoku", str(kosoku_bin())], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert any(m.endswith(" vfat.ko") for m in json.loads((out / "manifest.json").read_text())["modules"])
    vm = Vm(out, tmp_path, "seabios", f"fatal-{on_fatal}")
    try:
        reason = "kosoku: fatal: mount /dev/vda on /data (vfat, ro): Invalid argument"
        deadline = time.monotonic() + BOOT_TIMEOUT
        while reason not in vm.serial_text():
            assert time.monotonic() < deadline, f"no fatal line\n{vm.diagnostics()}"
            assert vm.proc.poll() is None or reason in vm.serial_text(), vm.diagnostics()
            time.sleep(0.2)
        if on_fatal == "reboot":
            # run-qemu passes -no-reboot: the guest's reboot ends QEMU with status 0.
            assert vm.proc.wait(timeout=60) == 0, vm.diagnostics()
            assert "kosoku: rebooting (on_fatal reboot)" in vm.serial_text()
        else:
            deadline = time.monotonic() + 30
            while "kosoku: halted (on_fatal halt)" not in vm.serial_text():
                assert time.monotonic() < deadline, vm.diagnostics()
                time.sleep(0.2)
            time.sleep(2)
            assert vm.proc.poll() is None, "a halted appliance keeps the machine on, with the reason on screen"
    except BaseException:
        print(vm.diagnostics())
        raise
    finally:
        vm.kill()


def test_nic_mode_uio_binds_the_nic_for_dpdk(built_image, tmp_path):
    """The table-driven NIC step the DPDK backend will use: uio_pci_generic via driver_override, before
    virtio_pci loads. (The kernel-socket server then has no eth0, so only the console is checked.)"""
    # This boot also covers a read-write data disk and hugepages.
    conf = tmp_path / "uio.conf"
    conf.write_text(appliance_test_config().replace("data_disk /dev/vda ro", "data_disk /dev/vda rw")
                    .replace("console ttyS0", "hugepages 8;\n    console ttyS0"))
    out = tmp_path / "image"
    p = subprocess.run([str(IMAGE / "build-image"), "--config", str(conf), "--nic", "uio", "--site",
                        str(built_image["base"] / "site"), "--out", str(out), "--kosoku", str(kosoku_bin())],
                       cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    modules = json.loads((out / "manifest.json").read_text())["modules"]
    assert modules[:2] == ["nic uio.ko", "nic uio_pci_generic.ko"], modules
    assert not any("virtio_net" in m for m in modules), modules
    vm = Vm(out, tmp_path, "seabios", "uio")
    serial = None
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while "serial console" not in vm.serial_text():
            assert time.monotonic() < deadline and vm.proc.poll() is None, vm.diagnostics()
            time.sleep(0.2)
        assert re.search(r"NIC mode uio, bound 0000:00:0[0-9a-f]\.0 to uio_pci_generic", vm.serial_text()), \
            vm.diagnostics()
        assert "kosoku: hugepages: 8 requested, 8 reserved" in vm.serial_text(), vm.diagnostics()
        serial = Serial(vm.sock)
        serial.command("")
        assert "NIC mode uio" in serial.command("version")
        assert "/dev/vda on /data (ext4, rw)" in serial.command("disk")
        serial.sock.sendall(b"poweroff\n")
        assert vm.proc.wait(timeout=120) == 0, vm.diagnostics()
        assert "kosoku: data disk unmounted" in vm.serial_text(), vm.diagnostics()
        # Cleanly unmounted: the host's fsck finds the file system clean without touching it.
        fsck = subprocess.run(["e2fsck", "-n", str(out / "data.img")], capture_output=True, text=True)
        assert fsck.returncode == 0 and "clean" in fsck.stdout, fsck.stdout + fsck.stderr
    except BaseException:
        print(vm.diagnostics())
        raise
    finally:
        if serial:
            serial.close()
        vm.kill()


def test_broken_config_fails_make_image_and_leaves_no_image(tmp_path):
    kosoku = kosoku_bin()
    assert kosoku.is_file(), f"{kosoku} not found: run `make build`"
    broken = tmp_path / "broken.conf"
    broken.write_text("worker_processes 1;\nhttp {\n    server {\n        listen 80;\n    }\n")  # missing "}"
    out = tmp_path / "out"
    env = dict(os.environ, KOSOKU_IMAGE_DIR=str(out), KOSOKU_BIN=str(kosoku))
    if kosoku == REPO / "build/release/kosoku":
        cmd = ["make", "-s", "image", f"CONFIG={broken}"]
    else:  # a stand-in binary: `make image` would rebuild build/release/kosoku first
        cmd = [str(IMAGE / "build-image"), "--config", str(broken), "--no-deps"]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    output = p.stdout + p.stderr
    assert p.returncode != 0, output
    assert re.search(rf"{re.escape(str(broken))}:\d+:\d+: ", output), output
    assert "no image built" in output, output
    assert not out.exists(), list(out.iterdir())
    assert not list(tmp_path.glob(".out.tmp-*")), "a temporary build directory was left behind"
