// Fuzzes the TOML config loader: any input either loads or is refused with config_error.
#include "filters/policy_loader.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    auto c = sluice::filters::load_config_string(
        std::string_view(reinterpret_cast<const char *>(data), size), "fuzz.toml");
    sluice::filters::policy p(c); // a config that loads must compile into a policy
    (void)p.decide("GET", "https", "api.github.com", 443);
  } catch (const sluice::filters::config_error &) {
  }
  return 0;
}
