// Rules: syntax and first-match-wins semantics.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cstring>
#include <string>

#include "preload/rules.h"

using namespace xp;

namespace {
sockaddr_storage v4(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  inet_pton(AF_INET, ip, &in->sin_addr);
  return ss;
}
sockaddr_storage v6(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in6*>(&ss);
  in->sin6_family = AF_INET6;
  in->sin6_port = htons(port);
  inet_pton(AF_INET6, ip, &in->sin6_addr);
  return ss;
}
bool allows(const RuleSet& rs, Role role, const sockaddr_storage& ss) {
  socklen_t len = ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  return rules_allow(rs, role, reinterpret_cast<const sockaddr*>(&ss), len);
}
RuleSet parse(const char* text) {
  RuleSet rs;
  char err[256];
  bool ok = parse_rules(text, &rs, err, sizeof err);
  INFO(err);
  REQUIRE(ok);
  return rs;
}
} // namespace

TEST_CASE("rules: default keeps loopback on TCP and allows the rest") {
  RuleSet rs = parse(kDefaultRules);
  CHECK(!allows(rs, Role::client, v4("127.0.0.1", 80)));
  CHECK(!allows(rs, Role::server, v4("127.1.2.3", 80)));
  CHECK(!allows(rs, Role::client, v6("::1", 80)));
  CHECK(!allows(rs, Role::client, v6("::ffff:127.0.0.1", 80))); // v4-mapped loopback
  CHECK(allows(rs, Role::client, v4("10.77.0.2", 5201)));
  CHECK(allows(rs, Role::server, v6("fd00::1", 6379)));
}

TEST_CASE("rules: first match wins; roles, prefixes and port ranges") {
  RuleSet rs = parse("deny server *:22; allow client 10.0.0.0/8:5000-5100; deny * 10.1.0.0/16;"
                     " allow * [fd00::]/8:*; allow server 192.168.1.5:6379");
  CHECK(!allows(rs, Role::server, v4("10.0.0.1", 22)));
  CHECK(allows(rs, Role::client, v4("10.1.2.3", 5000))); // rule 2 before rule 3
  CHECK(allows(rs, Role::client, v4("10.200.0.1", 5100)));
  CHECK(!allows(rs, Role::client, v4("10.200.0.1", 5101))); // no match -> deny
  CHECK(!allows(rs, Role::server, v4("10.1.2.3", 5000)));   // server: rule 2 skipped
  CHECK(allows(rs, Role::server, v6("fd12::5", 1)));
  CHECK(!allows(rs, Role::server, v6("fe80::1", 1)));
  CHECK(allows(rs, Role::server, v4("192.168.1.5", 6379)));
  CHECK(!allows(rs, Role::client, v4("192.168.1.5", 6379)));
  CHECK(allows(rs, Role::client, v6("::ffff:10.3.3.3", 5050))); // mapped v4 matches v4 rules
}

TEST_CASE("rules: odd prefixes and whitespace") {
  RuleSet rs = parse("  allow * 10.0.0.0/9 ;\n deny * *  ");
  CHECK(rs.count == 2);
  CHECK(allows(rs, Role::client, v4("10.127.255.255", 1)));
  CHECK(!allows(rs, Role::client, v4("10.128.0.0", 1)));
  RuleSet none = parse("   ");
  CHECK(none.count == 0);
  CHECK(!allows(none, Role::client, v4("10.0.0.1", 1)));
}

TEST_CASE("rules: malformed rules are rejected with the offending rule quoted") {
  for (const char* bad : {"allow", "allow *", "allow * 1.2.3", "allow * 1.2.3.4/", "allow * */8",
                          "allow * [zz::]", "allow * [::1]/129", "allow * *:-1", "allow * *:a-b",
                          "allow * *:100000", "allow * 1.2.3.4:5:6", "deny client *; allow"}) {
    CAPTURE(bad);
    RuleSet rs;
    char err[256] = "";
    CHECK(!parse_rules(bad, &rs, err, sizeof err));
    CHECK(std::string(err).find("rule ") == 0);
  }
  std::string many;
  for (int i = 0; i < 70; ++i)
    many += "allow * *;";
  RuleSet rs;
  char err[256];
  CHECK(!parse_rules(many.c_str(), &rs, err, sizeof err));
  CHECK(std::string(err).find("too many") != std::string::npos);
}

TEST_CASE("rules: non-inet addresses never match") {
  RuleSet rs = parse("allow * *");
  sockaddr_storage ss{};
  ss.ss_family = AF_UNIX;
  CHECK(!rules_allow(rs, Role::client, reinterpret_cast<sockaddr*>(&ss), sizeof ss));
  CHECK(!rules_allow(rs, Role::client, nullptr, 0));
}
