// The DPDK link line (CMakeLists.txt, kosoku_bypass): buses and PMDs linked --whole-archive register
// themselves from static constructors, before any EAL call. Without --whole-archive, EAL later fails with
// "failed to parse device" (../shared/notes/appliance-recipe.md Q1).
#include <gtest/gtest.h>

#include <algorithm>

#include "kernel-bypass/dpdk/eal.hh"

namespace kosoku::dpdk {
namespace {

TEST(DpdkLink, BusesAreRegisteredByStaticConstructors) {
  std::vector<std::string> buses = linked_buses();
  EXPECT_NE(std::find(buses.begin(), buses.end(), "vdev"), buses.end());
  EXPECT_NE(std::find(buses.begin(), buses.end(), "pci"), buses.end());
}

TEST(DpdkLink, VersionIsDebianDpdk) { EXPECT_EQ(version().rfind("DPDK ", 0), 0u) << version(); }

}  // namespace
}  // namespace kosoku::dpdk
