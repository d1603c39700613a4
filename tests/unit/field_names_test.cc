// Unit tests for core/http/field_names (the case-insensitive set of field names the proxy and the cache ask once
// per field line).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/http/field_names.hh"
#include "core/http/tokens.hh"

namespace kosoku::http {
namespace {

TEST(FieldNameSet, FewNamesFromListsCaseInsensitively) {
  FieldNameSet s;
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(s.contains("x"));
  s.add_list(" Keep-Alive ,, X-Secret\t, upgrade,");
  EXPECT_FALSE(s.empty());
  EXPECT_TRUE(s.contains("keep-alive"));
  EXPECT_TRUE(s.contains("x-secret"));
  EXPECT_TRUE(s.contains("X-SECRET"));
  EXPECT_TRUE(s.contains("Upgrade"));
  EXPECT_FALSE(s.contains("x-secre"));
  EXPECT_FALSE(s.contains(""));
  s.add("");
  EXPECT_FALSE(s.contains(""));
}

// Past a few names the set switches to hashing; membership must not change across the switch.
TEST(FieldNameSet, ManyNamesGiveTheSameAnswers) {
  FieldNameSet s;
  std::vector<std::string> names;
  for (int i = 0; i < 5000; ++i) names.push_back("X-Name-" + std::to_string(i));
  for (size_t i = 0; i < names.size(); ++i) {
    s.add(names[i]);
    // Everything added so far is in, the next one is not (checked around the switch and now and then).
    if (i < 20 || i % 997 == 0) {
      for (size_t k = 0; k <= i; ++k) ASSERT_TRUE(s.contains(names[k])) << i << " " << k;
      if (i + 1 < names.size()) {
        ASSERT_FALSE(s.contains(names[i + 1])) << i;
      }
    }
  }
  EXPECT_TRUE(s.contains("x-name-4999"));
  EXPECT_TRUE(s.contains("X-NAME-0"));
  EXPECT_FALSE(s.contains("X-Name-5000"));
  EXPECT_FALSE(s.contains("X-Name-"));
}

TEST(FieldNameSet, ConnectionOptionsOfEveryConnectionLine) {
  const std::vector<HeaderField> fields = {
      {"Connection", "close, X-A", HeaderToken::kConnection},
      {"X-A", "1", HeaderToken::kUnknown},
      {"X-Not-Connection", "X-B", HeaderToken::kUnknown},
      {"connection", "x-c", HeaderToken::kConnection},
  };
  FieldNameSet s;
  s.add_connection_options(fields);
  EXPECT_TRUE(s.contains("close"));
  EXPECT_TRUE(s.contains("x-a"));
  EXPECT_TRUE(s.contains("X-C"));
  EXPECT_FALSE(s.contains("X-B"));
}

}  // namespace
}  // namespace kosoku::http
