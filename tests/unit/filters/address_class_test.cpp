#include "filters/address_class.hpp"

#include <catch2/catch.hpp>

using namespace sluice::filters;
using boost::asio::ip::make_address;

TEST_CASE("every special range is classified", "[filters][address_class]") {
  struct row {
    const char *addr;
    address_class want;
  };
  const row rows[] = {
      {"8.8.8.8", address_class::global},
      {"1.1.1.1", address_class::global},
      {"0.0.0.0", address_class::unspecified},
      {"0.1.2.3", address_class::unspecified},
      {"127.0.0.1", address_class::loopback},
      {"127.255.255.254", address_class::loopback},
      {"10.0.0.1", address_class::private_net},
      {"172.16.0.1", address_class::private_net},
      {"172.31.255.255", address_class::private_net},
      {"172.32.0.1", address_class::global},
      {"192.168.1.1", address_class::private_net},
      {"169.254.1.1", address_class::link_local},
      {"169.254.169.254", address_class::metadata},
      {"100.100.100.200", address_class::metadata},
      {"100.64.0.1", address_class::cgnat},
      {"100.127.255.255", address_class::cgnat},
      {"224.0.0.1", address_class::multicast},
      {"239.255.255.250", address_class::multicast},
      {"255.255.255.255", address_class::broadcast},
      {"240.0.0.1", address_class::reserved},
      {"192.0.2.1", address_class::reserved},
      {"198.18.0.2", address_class::reserved},
      {"198.19.255.255", address_class::reserved},
      {"198.51.100.1", address_class::reserved},
      {"203.0.113.1", address_class::reserved},
      {"::", address_class::unspecified},
      {"::1", address_class::loopback},
      {"::ffff:127.0.0.1", address_class::loopback},
      {"::ffff:10.0.0.1", address_class::private_net},
      {"::ffff:8.8.8.8", address_class::global},
      {"::127.0.0.1", address_class::loopback},
      {"64:ff9b::7f00:1", address_class::loopback},
      {"64:ff9b::a9fe:a9fe", address_class::metadata},
      {"64:ff9b::808:808", address_class::global},
      {"64:ff9b:1::1", address_class::private_net},
      {"2002:7f00:1::1", address_class::loopback},
      {"2002:c0a8:101::1", address_class::private_net},
      {"2002:808:808::1", address_class::global},
      {"2001:0:4136:e378:8000:63bf:3fff:fdd2", address_class::teredo},
      {"fc00::1", address_class::private_net},
      {"fd00:ec2::254", address_class::metadata},
      {"fd12:3456::1", address_class::private_net},
      {"fe80::1", address_class::link_local},
      {"fec0::1", address_class::private_net},
      {"ff02::1", address_class::multicast},
      {"2001:db8::1", address_class::reserved},
      {"100::1", address_class::reserved},
      {"3fff::1", address_class::global},
      {"4000::1", address_class::reserved},
      {"2606:4700::1111", address_class::global},
  };
  for (const auto &r : rows) {
    INFO(r.addr);
    CHECK(classify(make_address(r.addr)) == r.want);
  }
}

TEST_CASE("this host's own addresses are refused", "[filters][address_class]") {
  std::vector<boost::asio::ip::address> own{make_address("203.0.114.7")};
  CHECK(classify(make_address("203.0.114.7"), own) == address_class::own_address);
  CHECK(classify(make_address("203.0.114.8"), own) == address_class::global);
}

TEST_CASE("address ranges", "[filters][address_class]") {
  auto r = parse_address_range("198.18.0.0/15");
  CHECK(r.contains(make_address("198.18.0.2")));
  CHECK(r.contains(make_address("198.19.1.1")));
  CHECK(r.contains(make_address("::ffff:198.18.0.2")));
  CHECK_FALSE(r.contains(make_address("198.20.0.1")));
  auto r6 = parse_address_range("fd00::/8");
  CHECK(r6.contains(make_address("fd00:ec2::254")));
  CHECK_FALSE(r6.contains(make_address("127.0.0.1")));
  CHECK(parse_address_range("127.0.0.1").contains(make_address("127.0.0.1")));
  CHECK_THROWS(parse_address_range("198.18.0.0/33"));
  CHECK_THROWS(parse_address_range("not-an-ip/8"));
  CHECK_THROWS(parse_address_range("10.0.0.0/x"));
}
