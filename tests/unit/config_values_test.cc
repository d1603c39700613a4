// Value syntaxes (time, size, numbers, CIDR, listen addresses) and variable templates.
#include <arpa/inet.h>

#include <string>

#include "core/config/values.hh"
#include "core/config/variables.hh"
#include "gtest/gtest.h"

namespace kosoku::config {
namespace {

TEST(ConfigValues, TimeInMilliseconds) {
  EXPECT_EQ(parse_time_ms("75"), 75000u);
  EXPECT_EQ(parse_time_ms("75s"), 75000u);
  EXPECT_EQ(parse_time_ms("500ms"), 500u);
  EXPECT_EQ(parse_time_ms("1m30s"), 90000u);
  EXPECT_EQ(parse_time_ms("1m 30s"), 90000u);
  EXPECT_EQ(parse_time_ms("1h5m"), 3900000u);
  EXPECT_EQ(parse_time_ms("1d"), 86400000u);
  EXPECT_EQ(parse_time_ms("1s500ms"), 1500u);
  EXPECT_EQ(parse_time_ms("0"), 0u);
  EXPECT_EQ(parse_time_ms("24d"), 2073600000u);
  EXPECT_FALSE(parse_time_ms("25d"));     // > 2^31-1 ms (nginx: less than 597 hours)
  EXPECT_FALSE(parse_time_ms("30s1m"));   // out of order
  EXPECT_FALSE(parse_time_ms("1s1s"));    // repeated
  EXPECT_FALSE(parse_time_ms("10 5s"));   // nothing after a bare number
  EXPECT_FALSE(parse_time_ms(""));
  EXPECT_FALSE(parse_time_ms("s"));
  EXPECT_FALSE(parse_time_ms("-1"));
  EXPECT_FALSE(parse_time_ms("1x"));
  EXPECT_FALSE(parse_time_ms("99999999999999999999999s"));
  EXPECT_FALSE(parse_time_ms("1y"));      // valid syntax, too large for ms
}

TEST(ConfigValues, TimeInSeconds) {
  EXPECT_EQ(parse_time_sec("60"), 60u);
  EXPECT_EQ(parse_time_sec("1h"), 3600u);
  EXPECT_EQ(parse_time_sec("1y"), 31536000u);
  EXPECT_EQ(parse_time_sec("1M1w"), 3196800u);
  EXPECT_FALSE(parse_time_sec("500ms"));
  EXPECT_FALSE(parse_time_sec("100y"));
}

TEST(ConfigValues, Sizes) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("1024"), 1024u);
  EXPECT_EQ(parse_size("8k"), 8192u);
  EXPECT_EQ(parse_size("8K"), 8192u);
  EXPECT_EQ(parse_size("1m"), 1048576u);
  EXPECT_EQ(parse_size("2M"), 2097152u);
  EXPECT_EQ(parse_size("3g"), 3ull << 30);
  EXPECT_FALSE(parse_size("1t"));
  EXPECT_FALSE(parse_size("k"));
  EXPECT_FALSE(parse_size("1.5m"));
  EXPECT_FALSE(parse_size("-1"));
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("99999999999g"));
  EXPECT_EQ(parse_number("42"), 42u);
  EXPECT_FALSE(parse_number("4294967296"));  // default max is UINT32_MAX
  EXPECT_FALSE(parse_number("+1"));
}

std::string addr_text(const AccessRule& r) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(r.family, r.addr, buf, sizeof(buf));
  return std::string(buf) + "/" + std::to_string(r.prefix);
}

TEST(ConfigValues, AccessRules) {
  AccessRule r;
  bool host_bits;
  ASSERT_TRUE(parse_access_rule("192.168.1.0/24", &r, &host_bits));
  EXPECT_EQ(r.family, AF_INET);
  EXPECT_EQ(addr_text(r), "192.168.1.0/24");
  EXPECT_FALSE(host_bits);
  ASSERT_TRUE(parse_access_rule("10.1.2.3/8", &r, &host_bits));
  EXPECT_TRUE(host_bits);
  EXPECT_EQ(addr_text(r), "10.0.0.0/8");  // masked, as nginx does after its warning
  ASSERT_TRUE(parse_access_rule("10.1.2.3", &r, &host_bits));
  EXPECT_EQ(addr_text(r), "10.1.2.3/32");
  ASSERT_TRUE(parse_access_rule("172.16.0.1/12", &r, &host_bits));
  EXPECT_EQ(addr_text(r), "172.16.0.0/12");
  ASSERT_TRUE(parse_access_rule("2001:db8::1/32", &r, &host_bits));
  EXPECT_EQ(r.family, AF_INET6);
  EXPECT_TRUE(host_bits);
  EXPECT_EQ(addr_text(r), "2001:db8::/32");
  ASSERT_TRUE(parse_access_rule("::1", &r, &host_bits));
  EXPECT_EQ(addr_text(r), "::1/128");
  ASSERT_TRUE(parse_access_rule("0.0.0.0/0", &r, &host_bits));
  EXPECT_EQ(r.prefix, 0);
  ASSERT_TRUE(parse_access_rule("all", &r, &host_bits));
  EXPECT_TRUE(r.all);
  EXPECT_FALSE(parse_access_rule("10.0.0.0/33", &r, &host_bits));
  EXPECT_FALSE(parse_access_rule("::/129", &r, &host_bits));
  EXPECT_FALSE(parse_access_rule("10.0.0/8", &r, &host_bits));
  EXPECT_FALSE(parse_access_rule("10.0.0.0/", &r, &host_bits));
  EXPECT_FALSE(parse_access_rule("", &r, &host_bits));
  EXPECT_FALSE(parse_access_rule("example.com", &r, &host_bits));
}

TEST(ConfigValues, ListenAddresses) {
  struct Case {
    const char* in;
    const char* text;
  };
  for (const Case& c : {Case{"8080", "0.0.0.0:8080"}, Case{"*:81", "0.0.0.0:81"}, Case{"127.0.0.1:8080", "127.0.0.1:8080"},
                        Case{"127.0.0.1", "127.0.0.1:80"}, Case{"[::]:80", "[::]:80"}, Case{"[::1]", "[::1]:80"},
                        Case{"localhost:9000", "127.0.0.1:9000"}, Case{"*", "0.0.0.0:80"}}) {
    ListenConf l;
    std::string e;
    ASSERT_TRUE(parse_listen_address(c.in, &l, &e)) << c.in << ": " << e;
    EXPECT_EQ(l.text, c.text) << c.in;
  }
  ListenConf l;
  std::string e;
  EXPECT_FALSE(parse_listen_address("0", &l, &e));
  EXPECT_EQ(e, "invalid port");
  EXPECT_FALSE(parse_listen_address("example.com:80", &l, &e));
  EXPECT_EQ(e, "host not found");
  EXPECT_FALSE(parse_listen_address("[::1:80", &l, &e));
  EXPECT_FALSE(parse_listen_address("[zz]:80", &l, &e));
  EXPECT_FALSE(parse_listen_address(":80", &l, &e) && l.text != "0.0.0.0:80");
}

// ---- variables ----

class FakeRequest : public VariableSource {
 public:
  bool get(const Variable& v, std::string_view suffix, std::string& out) const override {
    if (v.name == "uri") {
      out += uri;
      return true;
    }
    if (v.name == "status") {
      out += "200";
      return true;
    }
    if (v.name == "http_") {
      if (suffix == "user_agent") {
        out += agent;
        return true;
      }
      return false;
    }
    if (v.name == "remote_user") return false;
    out += "<" + std::string(v.name) + ">";
    return true;
  }
  std::string uri = "/a b";
  std::string agent = "curl \"x\"\\\n\x7f\xc3\xa9";
};

TEST(ConfigVariables, CompileSegments) {
  std::string e;
  Template t = compile("GET ${uri}?$args-$http_User_Agent$sent_http_x_y.", SourceLoc{"f", 3, 7}, &e);
  ASSERT_TRUE(e.empty()) << e;
  ASSERT_EQ(t.segments.size(), 8u);
  EXPECT_FALSE(t.segments[0].is_variable);
  EXPECT_EQ(t.segments[0].text, "GET ");
  EXPECT_EQ(t.segments[1].var->name, "uri");
  EXPECT_EQ(t.segments[3].var->name, "args");
  EXPECT_EQ(t.segments[5].var->name, "http_");
  EXPECT_EQ(t.segments[5].text, "user_agent");
  EXPECT_EQ(t.segments[6].var->name, "sent_http_");
  EXPECT_EQ(t.segments[6].text, "x_y");
  EXPECT_EQ(t.segments[7].text, ".");
  EXPECT_TRUE(t.has_variables());
  EXPECT_TRUE(t.uses("args"));
  EXPECT_FALSE(t.uses("host"));
  EXPECT_FALSE(compile("plain", {}, &e).has_variables());
}

TEST(ConfigVariables, AllListedNamesAreKnown) {
  for (const char* n : {"remote_addr", "remote_user", "time_local", "time_iso8601", "request", "request_method",
                        "request_uri", "uri", "args", "query_string", "status", "body_bytes_sent", "bytes_sent",
                        "http_host", "sent_http_etag", "host", "server_name", "server_port", "server_protocol",
                        "scheme", "request_time", "request_length", "msec", "connection", "connection_requests",
                        "upstream_cache_status", "document_root", "realpath_root", "content_type", "content_length",
                        "is_args", "pid", "hostname", "URI", "Host"}) {
    std::string e;
    Template t = compile(std::string("$") + n, SourceLoc{"f", 1, 1}, &e);
    EXPECT_TRUE(e.empty()) << n << ": " << e;
    ASSERT_EQ(t.segments.size(), 1u) << n;
  }
}

TEST(ConfigVariables, CompileErrors) {
  SourceLoc loc{"f.conf", 4, 9};
  std::string e;
  EXPECT_TRUE(compile("$foo", loc, &e).segments.empty());
  EXPECT_EQ(e, "f.conf:4:9: unknown \"foo\" variable");
  compile("$http_", loc, &e);
  EXPECT_EQ(e, "f.conf:4:9: unknown \"http_\" variable");
  compile("a$", loc, &e);
  EXPECT_EQ(e, "f.conf:4:9: invalid variable name in \"a$\"");
  compile("${uri", loc, &e);
  EXPECT_EQ(e, "f.conf:4:9: the closing bracket in \"uri\" variable is missing");
  compile("${u-ri}", loc, &e);
  EXPECT_EQ(e, "f.conf:4:9: invalid variable name in \"${u-ri}\"");
  compile("$0", loc, &e);  // $1..$9 are the regex captures; $0 is nothing
  EXPECT_EQ(e, "f.conf:4:9: unknown \"0\" variable");
}

TEST(ConfigVariables, ExpandWithEscaping) {
  FakeRequest req;
  std::string e;
  Template t = compile("\"$http_user_agent\" $uri $remote_user $status", {}, &e);
  std::string out;
  expand(t, req, out);  // kNone
  EXPECT_EQ(out, "\"curl \"x\"\\\n\x7f\xc3\xa9\" /a b  200");
  t.escape = LogEscape::kDefault;
  out = "pre:";
  expand(t, req, out);
  EXPECT_EQ(out, "pre:\"curl \\x22x\\x22\\x5C\\x0A\\x7F\\xC3\\xA9\" /a b - 200");
  t.escape = LogEscape::kJson;
  out.clear();
  expand(t, req, out);
  EXPECT_EQ(out, "\"curl \\\"x\\\"\\\\\\n\x7f\xc3\xa9\" /a b  200");
  req.agent = std::string("\x01\t\b\f\r", 5);
  out.clear();
  expand(compile("$http_user_agent", {}, &e), req, out);
  EXPECT_EQ(out, std::string("\x01\t\b\f\r", 5));
  out.clear();
  Template j = compile("$http_user_agent", {}, &e);
  j.escape = LogEscape::kJson;
  expand(j, req, out);
  EXPECT_EQ(out, "\\u0001\\t\\b\\f\\r");
  out.clear();
  Template missing = compile("[$http_referer]", {}, &e);
  missing.escape = LogEscape::kDefault;
  expand(missing, req, out);
  EXPECT_EQ(out, "[-]");
}

// The two header contexts (variables.hh): no CR, LF, NUL or other control byte of a variable's value reaches
// the field; literal text is kept.
TEST(ConfigVariables, ExpandForHeaderValues) {
  FakeRequest req;
  req.uri = std::string("/a\r\nSet-Cookie: x=1\0\x01\x1b\x7f\tb %41%25\xc3\xa9", 34);
  std::string e;
  Template t = compile("http://h$uri|$remote_user|\t", {}, &e);
  ASSERT_TRUE(e.empty()) << e;
  std::string out;
  t.escape = LogEscape::kField;
  expand(t, req, out);
  EXPECT_EQ(out, "http://h/a  Set-Cookie: x=1    \tb %41%25\xc3\xa9||\t");  // SP for each, HTAB kept
  t.escape = LogEscape::kUri;
  out = "Location: ";
  expand(t, req, out);
  EXPECT_EQ(out, "Location: http://h/a%0D%0ASet-Cookie:%20x=1%00%01%1B%7F%09b%20%41%25%C3%A9||\t");
  // Nothing is encoded twice; a value without such bytes is copied as it is.
  req.uri = "/already%0D%0Aencoded?x=%20";
  out.clear();
  expand(t, req, out);
  EXPECT_EQ(out, "http://h/already%0D%0Aencoded?x=%20||\t");
  out.clear();
  t.escape = LogEscape::kField;
  expand(t, req, out);
  EXPECT_EQ(out, "http://h/already%0D%0Aencoded?x=%20||\t");
}

TEST(ConfigVariables, ExpandDoesNotReallocateWhenReserved) {
  FakeRequest req;
  std::string e;
  Template t = compile("$uri $status $http_user_agent", {}, &e);
  t.escape = LogEscape::kDefault;
  std::string out;
  out.reserve(256);
  const char* data = out.data();
  expand(t, req, out);
  EXPECT_EQ(out.data(), data);
}

TEST(ConfigVariables, HttpVarNameMatching) {
  EXPECT_TRUE(http_var_name_matches("User-Agent", "user_agent"));
  EXPECT_TRUE(http_var_name_matches("X_Foo", "x_foo"));
  EXPECT_FALSE(http_var_name_matches("User-Agents", "user_agent"));
  EXPECT_FALSE(http_var_name_matches("Referer", "user_agent"));
}

TEST(Re2Spelling, NamedGroupsOnly) {
  EXPECT_EQ(re2_spelling("^/(?<sub>[a-z]+)/(?<rest>.*)$"), "^/(?P<sub>[a-z]+)/(?P<rest>.*)$");
  EXPECT_EQ(re2_spelling("(?P<a>x)"), "(?P<a>x)");
  EXPECT_EQ(re2_spelling("(?<=x)y(?<!z)"), "(?<=x)y(?<!z)");  // lookbehind: left for RE2 to refuse
  EXPECT_EQ(re2_spelling("\\(?<x"), "\\(?<x");            // an escaped parenthesis is a literal
  EXPECT_EQ(re2_spelling("(?<"), "(?<");
  EXPECT_EQ(re2_spelling(""), "");
}

}  // namespace
}  // namespace kosoku::config
