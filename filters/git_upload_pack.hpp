#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::filters {

// Read-only Git over smart HTTP. A fetch or clone must POST its negotiation to
// `<repo>/git-upload-pack`; the server answers with objects only, so in network-read such a POST is a
// read, once its body is shown to be nothing but fetch negotiation.

// True for `POST .../git-upload-pack` with `Content-Type: application/x-git-upload-pack-request`.
bool is_git_upload_pack(std::string_view method, std::string_view path, std::string_view content_type);

// True for a path ending in `/git-receive-pack` (a push).
bool is_git_receive_pack(std::string_view path);

// The largest negotiation accepted, as sent and inflated.
inline constexpr std::size_t max_git_request_bytes = 4 * 1024 * 1024;
inline constexpr std::size_t max_git_inflated_bytes = 16 * 1024 * 1024;

// Checks a request body: pkt-lines of protocol v0/v1 (want, have, shallow, deepen, deepen-since,
// deepen-not, filter, done, flush) or v2 (command=ls-refs or command=fetch, capabilities, delim,
// their arguments, flush). `gzip`: the body has Content-Encoding gzip and is inflated first (at most
// max_git_inflated_bytes). Returns an empty view when it is a fetch, else the reason
// (`git_request_refused`).
std::string_view check_git_upload_pack(std::string_view body, bool gzip);

// Inflates a gzip member (RFC 1952) with at most `limit` bytes out; nullopt when it is not one.
std::optional<std::string> gunzip(std::string_view in, std::size_t limit);

} // namespace sluice::filters
