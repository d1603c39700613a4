// Unit tests for the appliance's PID-1 helpers and serial console (image/): SHA-256, the module list, the
// kernel command line, IPv4 parsing, NIC binding over a fake sysfs tree, the console's line discipline and
// its commands over a socketpair. The parts that need a VM (mounts, finit_module, ioctl on eth0, reboot) are
// covered by tests/integration/test_appliance.py.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/base/log.hh"
#include "core/config/conf.hh"
#include "core/config/loader.hh"
#include "core/stats/counters.hh"
#include "image/console.hh"
#include "image/kmod.hh"
#include "image/nic.hh"
#include "image/pid1.hh"
#include "image/sha256.hh"
#include "tests/unit/tls_test_util.hh"

namespace kosoku::appliance {
namespace {

namespace fs = std::filesystem;

// ------------------------------------------------------------------------------------------------ SHA-256

TEST(ApplianceSha256, Fips180Vectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(ApplianceSha256, PaddingBoundaries) {
  // Lengths around the 55/56-byte padding split and the 64-byte block (values from Python's hashlib).
  EXPECT_EQ(sha256_hex(std::string(55, 'x')), "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  EXPECT_EQ(sha256_hex(std::string(56, 'x')), "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  EXPECT_EQ(sha256_hex(std::string(63, 'x')), "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2");
  EXPECT_EQ(sha256_hex(std::string(64, 'x')), "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  EXPECT_EQ(sha256_hex(std::string(65, 'x')), "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9");
  EXPECT_EQ(sha256_hex(std::string(119, 'x')), "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c");
  EXPECT_EQ(sha256_hex(std::string(120, 'x')), "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98");
}

// -------------------------------------------------------------------------------------------- module list

TEST(ApplianceKmod, ParsesPhasesFilesParamsAndOptional) {
  std::vector<ModuleEntry> m;
  std::string err;
  ASSERT_TRUE(parse_load_order("# header\n\nnic uio.ko\nnic  uio_pci_generic.ko   # trailing comment\n"
                               "disk? crc32c-intel.ko\r\ndisk ext4.ko.zst a=1 b=two\n",
                               &m, &err))
      << err;
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].phase, "nic");
  EXPECT_EQ(m[0].file, "uio.ko");
  EXPECT_EQ(m[0].line, 3);
  EXPECT_FALSE(m[0].optional);
  EXPECT_EQ(m[1].file, "uio_pci_generic.ko");
  EXPECT_EQ(m[2].phase, "disk");
  EXPECT_TRUE(m[2].optional);
  EXPECT_EQ(m[2].file, "crc32c-intel.ko");
  EXPECT_EQ(m[3].file, "ext4.ko.zst");
  EXPECT_EQ(m[3].params, "a=1 b=two");
  EXPECT_EQ(m[3].line, 6);
}

TEST(ApplianceKmod, RejectsMalformedLines) {
  std::vector<ModuleEntry> m;
  std::string err;
  EXPECT_FALSE(parse_load_order("nic uio.ko\nnic\n", &m, &err));
  EXPECT_EQ(err, "load.order:2: expected \"PHASE FILE [PARAMS]\"");
  EXPECT_FALSE(parse_load_order("disk ../../etc/passwd.ko\n", &m, &err));
  EXPECT_EQ(err, "load.order:1: \"../../etc/passwd.ko\" is not a module file name");
  EXPECT_FALSE(parse_load_order("disk ext4.o\n", &m, &err));
  EXPECT_EQ(err, "load.order:1: \"ext4.o\" is not a module file name");
}

TEST(ApplianceKmod, MissingRequiredModuleStopsOptionalOneWarns) {
  std::vector<ModuleEntry> m;
  std::string err;
  ASSERT_TRUE(parse_load_order("disk? absent-a.ko\nnic absent-nic.ko\ndisk absent-b.ko\ndisk absent-c.ko\n", &m,
                               &err));
  int loaded = 0;
  std::vector<std::string> warnings;
  // Phase "" = every phase but "nic": the optional module warns, the first required one stops the list.
  err = load_modules(m, "", "/nonexistent-kosoku-modules", &loaded, &warnings);
  EXPECT_EQ(err.rfind("insmod absent-b.ko: No such file or directory", 0), 0u) << err;
  EXPECT_EQ(loaded, 0);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("insmod absent-a.ko"), std::string::npos);
  EXPECT_NE(warnings[0].find("(optional)"), std::string::npos);
  err = load_modules(m, "nic", "/nonexistent-kosoku-modules", &loaded, nullptr);
  EXPECT_EQ(err.rfind("insmod absent-nic.ko:", 0), 0u) << err;
}

// ---------------------------------------------------------------------------------------- command line

TEST(AppliancePid1, CmdlineValue) {
  const std::string cmdline = "console=tty0 console=ttyS0,115200 quiet kosoku.nic=uio kosoku.pid1=1\n";
  EXPECT_EQ(cmdline_value(cmdline, "kosoku.nic"), "uio");
  EXPECT_EQ(cmdline_value(cmdline, "kosoku.pid1"), "1");
  EXPECT_EQ(cmdline_value(cmdline, "console"), "tty0");  // the first one, as the kernel's early parsing
  EXPECT_EQ(cmdline_value(cmdline, "quiet"), "1");
  EXPECT_EQ(cmdline_value(cmdline, "kosoku"), "");
  EXPECT_EQ(cmdline_value(cmdline, "nic"), "");
  EXPECT_EQ(cmdline_value("", "quiet"), "");
}

TEST(AppliancePid1, NotPid1OnTheTestHost) {
  // The test process is not PID 1 (and the host's command line has no kosoku.pid1=1), so fatal() and
  // power_off() would only exit, never reboot the machine.
  EXPECT_NE(getpid(), 1);
  EXPECT_FALSE(is_pid1());
  EXPECT_GT(uptime_s(), 0.0);
}

// ------------------------------------------------------------------------------------------------ network

TEST(ApplianceNic, Ipv4CidrParsing) {
  auto c = parse_ipv4_cidr("10.0.2.15/24");
  ASSERT_TRUE(c);
  EXPECT_EQ(ipv4_to_string(c->addr), "10.0.2.15");
  EXPECT_EQ(c->prefix, 24);
  c = parse_ipv4_cidr("192.168.1.1");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->prefix, 32);
  EXPECT_TRUE(parse_ipv4_cidr("0.0.0.0/0"));
  EXPECT_FALSE(parse_ipv4_cidr("10.0.2.15/33"));
  EXPECT_FALSE(parse_ipv4_cidr("10.0.2.15/"));
  EXPECT_FALSE(parse_ipv4_cidr("10.0.2.15/2x"));
  EXPECT_FALSE(parse_ipv4_cidr("10.0.2/24"));
  EXPECT_FALSE(parse_ipv4_cidr("fe80::1/64"));
  EXPECT_FALSE(parse_ipv4_cidr(""));
  EXPECT_FALSE(parse_ipv4("10.0.2.256"));
  EXPECT_EQ(ipv4_to_string(prefix_to_netmask(24)), "255.255.255.0");
  EXPECT_EQ(ipv4_to_string(prefix_to_netmask(0)), "0.0.0.0");
  EXPECT_EQ(ipv4_to_string(prefix_to_netmask(32)), "255.255.255.255");
  EXPECT_EQ(ipv4_to_string(prefix_to_netmask(19)), "255.255.224.0");
}

TEST(ApplianceNic, ModeTable) {
  ASSERT_NE(find_nic_mode("kernel"), nullptr);
  EXPECT_TRUE(find_nic_mode("kernel")->kernel_netdev);
  EXPECT_TRUE(find_nic_mode("kernel")->override_driver.empty());
  ASSERT_NE(find_nic_mode("uio"), nullptr);
  EXPECT_EQ(find_nic_mode("uio")->override_driver, "uio_pci_generic");
  EXPECT_FALSE(find_nic_mode("uio")->kernel_netdev);
  EXPECT_EQ(find_nic_mode("vfio")->override_driver, "vfio-pci");
  EXPECT_EQ(find_nic_mode("dpdk"), nullptr);
  EXPECT_NE(find_nic_mode(kDefaultNicMode), nullptr);
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("kosoku-sysfs-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "drivers" / "uio_pci_generic");
    std::ofstream(root_ / "drivers_probe");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path device(const std::string& bdf, const std::string& vendor, const std::string& dev) {
    fs::path d = root_ / "devices" / bdf;
    fs::create_directories(d);
    std::ofstream(d / "vendor") << vendor << "\n";
    std::ofstream(d / "device") << dev << "\n";
    std::ofstream(d / "driver_override");
    return d;
  }
  static std::string slurp(const fs::path& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  fs::path root_;
};

TEST_F(FakeSysfs, BindsVirtioNetDevicesThroughDriverOverride) {
  fs::path nic = device("0000:00:03.0", "0x1af4", "0x1000");
  fs::path modern = device("0000:00:04.0", "0x1af4", "0x1041");
  fs::path blk = device("0000:00:05.0", "0x1af4", "0x1001");  // virtio-blk: not a NIC
  fs::path e1000 = device("0000:00:06.0", "0x8086", "0x100e");
  // The fake kernel "binds" at once: the driver links exist, as the real drivers_probe would create them.
  fs::create_directory_symlink("../../drivers/uio_pci_generic", nic / "driver");
  fs::create_directory_symlink("../../drivers/uio_pci_generic", modern / "driver");
  std::string err;
  std::vector<std::string> bound = bind_nics(*find_nic_mode("uio"), &err, root_.string());
  EXPECT_EQ(err, "");
  std::sort(bound.begin(), bound.end());
  EXPECT_EQ(bound, (std::vector<std::string>{"0000:00:03.0", "0000:00:04.0"}));
  EXPECT_EQ(slurp(nic / "driver_override"), "uio_pci_generic");
  EXPECT_EQ(slurp(modern / "driver_override"), "uio_pci_generic");
  EXPECT_EQ(slurp(blk / "driver_override"), "");
  EXPECT_EQ(slurp(e1000 / "driver_override"), "");
}

TEST_F(FakeSysfs, ReportsADeviceThatDidNotBind) {
  device("0000:00:03.0", "0x1af4", "0x1000");
  std::string err;
  EXPECT_TRUE(bind_nics(*find_nic_mode("uio"), &err, root_.string()).empty());
  EXPECT_EQ(err, "0000:00:03.0 is bound to no driver, not uio_pci_generic (is its module in the \"nic\" phase?)");
}

TEST_F(FakeSysfs, NoNicAndKernelMode) {
  std::string err;
  EXPECT_TRUE(bind_nics(*find_nic_mode("uio"), &err, root_.string()).empty());
  EXPECT_EQ(err, "opendir " + (root_ / "devices").string() + ": No such file or directory");
  device("0000:00:05.0", "0x1af4", "0x1001");
  EXPECT_TRUE(bind_nics(*find_nic_mode("uio"), &err, root_.string()).empty());
  EXPECT_EQ(err, "no virtio-net PCI device found");
  // The kernel mode binds nothing and touches nothing.
  EXPECT_TRUE(bind_nics(*find_nic_mode("kernel"), &err, root_.string()).empty());
  EXPECT_EQ(err, "");
}

// -------------------------------------------------------------------------------------- line discipline

TEST(ApplianceConsole, RawTerminalGetsEchoAndCrEndsTheLine) {
  LineEditor ed;
  LineEditor::Output out;
  for (char c : std::string("stats")) ed.feed(std::string_view(&c, 1), &out);  // typed one key at a time
  EXPECT_EQ(out.echo, "stats");
  ed.feed("\r", &out);
  EXPECT_EQ(out.echo, "stats\n");
  ASSERT_EQ(out.lines, std::vector<std::string>{"stats"});
  EXPECT_TRUE(ed.echo());
  out = {};
  ed.feed("cx\x7f", &out);  // backspace erases
  ed.feed("ores\r", &out);
  EXPECT_EQ(out.lines, std::vector<std::string>{"cores"});
  EXPECT_EQ(out.echo, "cx\b \bores\n");
}

TEST(ApplianceConsole, ScriptWithLfGetsNoEcho) {
  LineEditor ed;
  LineEditor::Output out;
  ed.feed("\nstats json\nconfig\n", &out);  // the first (empty) line turns echo off before anything is echoed
  EXPECT_EQ(out.echo, "");
  EXPECT_EQ(out.lines, (std::vector<std::string>{"", "stats json", "config"}));
  EXPECT_FALSE(ed.echo());
  // A line split across reads (a 16-byte UART FIFO) is still one line.
  out = {};
  ed.feed("sta", &out);
  ed.feed("ts prom\n", &out);
  EXPECT_EQ(out.lines, std::vector<std::string>{"stats prom"});
  EXPECT_EQ(out.echo, "");
}

TEST(ApplianceConsole, CrLfCountsOnceAndControlKeys) {
  LineEditor ed;
  LineEditor::Output out;
  ed.feed("help\r\nuptime\r\n", &out);
  EXPECT_EQ(out.lines, (std::vector<std::string>{"help", "uptime"}));
  EXPECT_FALSE(ed.echo());  // CR LF: a line-mode client (telnet-like) that echoes locally
  out = {};
  ed.feed("garbage\x15log 5\n", &out);  // Ctrl-U clears the line
  EXPECT_EQ(out.lines, std::vector<std::string>{"log 5"});
  out = {};
  ed.feed("poweroff\x03", &out);  // Ctrl-C drops the line (an empty line: a fresh prompt)
  EXPECT_EQ(out.lines, std::vector<std::string>{""});
  out = {};
  ed.feed(std::string(LineEditor::kMaxLine + 50, 'a') + "\n", &out);
  ASSERT_EQ(out.lines.size(), 1u);
  EXPECT_EQ(out.lines[0].size(), LineEditor::kMaxLine);
  out = {};
  ed.feed("a\tb\x01\x1b" "c\n", &out);  // tab → space, other control bytes ignored
  EXPECT_EQ(out.lines, std::vector<std::string>{"a bc"});
}

// ------------------------------------------------------------------------------------------------ commands

class ConsoleCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    conf_.file = "/etc/kosoku.conf";
    conf_.text = "worker_processes 2;\nhttp { server { listen 80; } }\n";
    conf_.worker_processes = 2;
    for (int i = 0; i < 2; ++i) {
      cores_[i].core = i;
      cores_[i].disk.resize(1);
      cores_[i].disk[0].name = "default";
    }
    cores_[0].conn_accepted = 5;
    cores_[0].conn_active = 2;
    cores_[0].requests = 7;
    cores_[0].count_response(200);
    cores_[0].count_response(404);
    cores_[1].requests = 3;
    cores_[1].count_response(200);
    cores_[1].disk[0].submitted = 11;
    cores_[1].disk[0].overflows = 1;
    cores_[1].disk[0].in_flight = 4;
  }
  Console make() {
    return Console(conf_, [this] { return std::vector<const stats::CoreStats*>{&cores_[0], &cores_[1]}; });
  }
  config::MainConf conf_;
  stats::CoreStats cores_[2];
};

TEST_F(ConsoleCommands, StatsInThreeFormatsSumTheCores) {
  Console c = make();
  const std::string json = c.execute("stats json");
  EXPECT_NE(json.find("\"requests\":10"), std::string::npos) << json;
  const std::string text = c.execute("stats");
  EXPECT_NE(text.find("Active connections: 2 \n"), std::string::npos) << text;
  const std::string prom = c.execute("  STATS   prom ");
  EXPECT_NE(prom.find("kosoku_http_requests_total{core=\"1\"} 3"), std::string::npos) << prom;
  EXPECT_EQ(c.execute("stats xml"), "usage: stats [json|prom]");
}

TEST_F(ConsoleCommands, CoresConnsDisk) {
  Console c = make();
  const std::string cores = c.execute("cores");
  EXPECT_NE(cores.find("core 0: active 2 reading 0 writing 0 waiting 0 accepted 5 rejected 0 requests 7 "),
            std::string::npos)
      << cores;
  EXPECT_NE(cores.find("core 1: "), std::string::npos);
  EXPECT_NE(cores.find("2xx 1 3xx 0 4xx 1"), std::string::npos) << cores;
  const std::string conns = c.execute("conns");
  EXPECT_EQ(conns.rfind("total: active 2 reading 0 writing 0 waiting 0 accepted 5 rejected 0\n", 0), 0u) << conns;
  const std::string disk = c.execute("disk");
  EXPECT_NE(disk.find("data disk: not mounted (not running as PID 1)"), std::string::npos) << disk;
  EXPECT_NE(disk.find("queue default: submitted 11 inline 0 completed 0 in_flight 4 waiting 0 overflows 1"),
            std::string::npos)
      << disk;
  EXPECT_NE(disk.find("  core 1 default: submitted 11"), std::string::npos) << disk;
}

TEST_F(ConsoleCommands, ConfigShowsTextAndDigest) {
  Console c = make();
  const std::string out = c.execute("config");
  const std::string digest = sha256_hex(conf_.text);
  EXPECT_EQ(out.rfind("# config /etc/kosoku.conf (" + std::to_string(conf_.text.size()) + " bytes)\n# sha256 " +
                          digest + "  ",
                      0),
            0u)
      << out;
  EXPECT_NE(out.find(conf_.text), std::string::npos);
  EXPECT_NE(out.find("# end of config, sha256 " + digest), std::string::npos);
}

TEST_F(ConsoleCommands, LogVersionUptimeHelpUnknownPower) {
  Console c = make();
  auto& log = base::ErrorLog::global();
  log.write(base::LogLevel::kError, "appliance-test line one");
  log.write(base::LogLevel::kError, "appliance-test line two");
  const std::string last = c.execute("log 1");
  EXPECT_NE(last.find("appliance-test line two"), std::string::npos) << last;
  EXPECT_EQ(last.find("appliance-test line one"), std::string::npos) << last;
  EXPECT_NE(c.execute("log").find("appliance-test line one"), std::string::npos);
  EXPECT_EQ(c.execute("log x"), "usage: log [N]  (N > 0)");
  EXPECT_NE(c.execute("version").find("2 worker loops"), std::string::npos);
  EXPECT_NE(c.execute("version").find("\nnetwork kernel (io_uring sockets)"), std::string::npos);
  EXPECT_EQ(c.execute("uptime").rfind("up ", 0), 0u);
  EXPECT_NE(c.execute("help").find("poweroff"), std::string::npos);
  EXPECT_EQ(c.execute(""), "");
  EXPECT_EQ(c.execute("frob x"), "unknown command \"frob\": type help");
  int power = 0;
  EXPECT_EQ(c.execute("poweroff", &power), "powering off: syncing and unmounting the data disk");
  EXPECT_EQ(power, 1);
  EXPECT_EQ(c.execute("reboot", &power), "rebooting: syncing and unmounting the data disk");
  EXPECT_EQ(power, 2);
}

TEST_F(ConsoleCommands, AddedCommandsGetTheWholeLineAndAppearInHelp) {
  Console c = make();
  std::string seen;
  EXPECT_TRUE(c.add_command("rules", "rules get|set|del|count ...", [&](std::string_view line) {
    seen = std::string(line);
    return std::string("3 hosts\n");
  }));
  EXPECT_FALSE(c.add_command("stats", "no", [](std::string_view) { return std::string(); }));  // built-in
  EXPECT_FALSE(c.add_command("RULES", "again", [](std::string_view) { return std::string(); }));
  EXPECT_EQ(c.execute("Rules count  "), "3 hosts\n");
  EXPECT_EQ(seen, "Rules count  ");
  EXPECT_NE(c.execute("help").find("\n  rules              rules get|set|del|count ..."), std::string::npos)
      << c.execute("help");
}

TEST(NetworkLine, NamesTheBackendAddressGatewayAndBoundNic) {
  config::NetworkConf net;
  EXPECT_EQ(network_line(net, {}), "network kernel (io_uring sockets)");
  net.backend = config::NetworkBackend::kDpdk;
  net.dpdk.address = 0x0a00020f;  // 10.0.2.15, host byte order as config/network_conf.hh stores it
  net.dpdk.prefix_len = 24;
  net.dpdk.gateway = 0x0a000202;
  EXPECT_EQ(network_line(net, {"0000:00:03.0"}),
            "network dpdk 10.0.2.15/24 via 10.0.2.2 on 0000:00:03.0 (DPDK PMD, kosoku's TCP/IP stack)");
  net.dpdk.gateway = 0;
  net.dpdk.prefix_len = 16;
  EXPECT_EQ(network_line(net, {}), "network dpdk 10.0.2.15/16 (DPDK PMD, kosoku's TCP/IP stack)");
  EXPECT_EQ(network_line(net, {"0000:00:03.0", "0000:00:04.0"}),
            "network dpdk 10.0.2.15/16 on 0000:00:03.0 0000:00:04.0 (DPDK PMD, kosoku's TCP/IP stack)");
}

// The shipped appliance configs: the default image runs DPDK on 10.0.2.15 (QEMU user-net) with hugepages and
// one worker; conf/appliance-kernel.conf keeps the kernel backend on eth0. Both serve HTTPS with the default
// pair the image build generates (here: a copy of conf/ with a pair made by the test).
TEST(ShippedApplianceConfigs, DpdkByDefaultKernelKept) {
  const auto repo = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  char tmpl[] = "/tmp/kosoku_appliance_conf_XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(tmpl);
  config::LoadResult dpdk =
      config::load(kosoku::testing::shipped_conf_with_default_pair(repo, dir, "appliance.conf"));
  ASSERT_TRUE(dpdk.ok()) << dpdk.error.message;
  EXPECT_TRUE(dpdk.warnings.empty());
  const config::MainConf& d = *dpdk.conf;
  EXPECT_EQ(d.network.backend, config::NetworkBackend::kDpdk);
  EXPECT_EQ(d.worker_processes, 1);
  EXPECT_GT(d.appliance.hugepages, 0u);
  EXPECT_TRUE(std::find(d.network.dpdk.eal.begin(), d.network.dpdk.eal.end(), "--iova-mode=pa") !=
              d.network.dpdk.eal.end());
  EXPECT_TRUE(std::find(d.network.dpdk.eal.begin(), d.network.dpdk.eal.end(), "--in-memory") !=
              d.network.dpdk.eal.end());
  EXPECT_EQ(network_line(d.network, {}), "network dpdk 10.0.2.15/24 via 10.0.2.2 (DPDK PMD, kosoku's TCP/IP stack)");

  config::LoadResult kernel = config::load((dir / "appliance-kernel.conf").string());
  ASSERT_TRUE(kernel.ok()) << kernel.error.message;
  EXPECT_TRUE(kernel.warnings.empty());
  const config::MainConf& k = *kernel.conf;
  EXPECT_EQ(k.network.backend, config::NetworkBackend::kKernel);
  EXPECT_EQ(k.appliance.address, "10.0.2.15/24");
  EXPECT_EQ(k.appliance.gateway, "10.0.2.2");
  EXPECT_EQ(k.appliance.interface, "eth0");
  EXPECT_TRUE(k.http.listen_sockets.size() >= 2 &&
              std::any_of(k.http.listen_sockets.begin(), k.http.listen_sockets.end(),
                          [](const config::ListenSocket& ls) { return ls.conf.ssl; }));
  std::filesystem::remove_all(dir);
}

// The console thread over a socketpair: the same bytes a QEMU socket chardev carries.
TEST_F(ConsoleCommands, ThreadServesLinesAndPowerAction) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Console c = make();
  std::atomic<int> power{-1};
  c.set_power_action([&](bool reboot) { power = reboot ? 2 : 1; });
  ASSERT_EQ(c.start_fd(sv[0], false), "");
  auto read_until = [&](const std::string& marker) {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    char buf[4096];
    while (got.find(marker) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      timeval tv{0, 100000};
      setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      const ssize_t n = read(sv[1], buf, sizeof(buf));
      if (n > 0) got.append(buf, static_cast<size_t>(n));
    }
    return got;
  };
  EXPECT_NE(read_until("kosoku> ").find("serial console: type help"), std::string::npos);
  ASSERT_EQ(write(sv[1], "\nconns\n", 7), 7);
  const std::string got = read_until("accepted 0 rejected 0\r\nkosoku> ");
  // No echo for a script: the reply follows the prompt; every LF goes out as CR LF.
  EXPECT_NE(got.find("\r\nkosoku> total: active 2 reading 0 writing 0 waiting 0 accepted 5 rejected 0\r\n"
                     "core 0: active 2"),
            std::string::npos)
      << got;
  EXPECT_EQ(got.find("conns"), std::string::npos) << got;
  ASSERT_EQ(write(sv[1], "poweroff\n", 9), 9);
  EXPECT_NE(read_until("data disk\r\n").find("powering off"), std::string::npos);
  for (int i = 0; i < 100 && power.load() < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(power.load(), 1);
  c.stop();
  close(sv[1]);
}

}  // namespace
}  // namespace kosoku::appliance
