// libFuzzer target: a git-upload-pack request body, raw and as gzip, through the network-read check,
// and Basic credentials through the credential injector (both read untrusted bytes from the sandbox).
#include "filters/credentials.hpp"
#include "filters/git_upload_pack.hpp"

#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char *>(data), size);
  (void)sluice::filters::check_git_upload_pack(in, false);
  (void)sluice::filters::check_git_upload_pack(in, true);
  (void)sluice::filters::gunzip(in, 1 << 20);
  if (auto decoded = sluice::filters::base64_decode(in)) {
    // Round trip: what decodes must encode back to the same text up to padding.
    auto again = sluice::filters::base64_decode(sluice::filters::base64_encode(*decoded));
    if (!again || *again != *decoded) __builtin_trap();
  }
  static const sluice::filters::credential_injector injector([] {
    sluice::filters::credential_config c;
    c.name = "fuzz";
    c.hosts = {"api.example.com"};
    c.format = "basic:user";
    c.secret = "SECRET";
    return std::vector<sluice::filters::credential_config>{c};
  }());
  std::vector<std::pair<std::string_view, std::string_view>> fields{{"Authorization", in}, {"X", in}};
  auto r = injector.apply(fields, in, "api.example.com", "https", 443);
  for (auto &[n, v] : r.set) {
    if (v.find("sluice-credential-fuzz") != std::string::npos) __builtin_trap(); // never left in place
  }
  (void)injector.apply(fields, in, "other.example.com", "https", 443);
  return 0;
}
