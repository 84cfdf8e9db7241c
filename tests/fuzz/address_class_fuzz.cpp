// Fuzzes the address classifier and range parser. Invariant: an IPv4-mapped IPv6 address is
// classified exactly as the IPv4 address it carries.
#include "filters/address_class.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

using namespace sluice::filters;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 4) {
    boost::asio::ip::address_v4::bytes_type b4;
    std::memcpy(b4.data(), data, 4);
    boost::asio::ip::address_v4 v4(b4);
    boost::asio::ip::address_v6 mapped = boost::asio::ip::make_address_v6(boost::asio::ip::v4_mapped, v4);
    if (classify(v4) != classify(mapped)) __builtin_trap();
  }
  if (size >= 16) {
    boost::asio::ip::address_v6::bytes_type b6;
    std::memcpy(b6.data(), data, 16);
    (void)classify(boost::asio::ip::address_v6(b6));
  }
  try {
    auto r = parse_address_range(std::string_view(reinterpret_cast<const char *>(data), size));
    (void)r.contains(r.base);
    if (!r.contains(r.base)) __builtin_trap();
  } catch (const std::invalid_argument &) {
  }
  return 0;
}
