#pragma once
// The fields a proxy passes on: hop-by-hop ones (RFC 9110 section 7.6.1) and the proxy's own are
// left out. Shared by the stages that write heads (http1/forward.cpp, websocket/session_websocket.cpp).
#include "gateway/net.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace sluice::gateway::detail {

// Fields a proxy must not forward (RFC 9110 section 7.6.1) plus the proxy's own credentials. Beast
// names every one of them, so only a field it does not know needs its name read.
inline bool hop_by_hop(http::field f, std::string_view name) {
  switch (f) {
  case http::field::connection:
  case http::field::keep_alive:
  case http::field::te:
  case http::field::trailer:
  case http::field::transfer_encoding:
  case http::field::upgrade:
  case http::field::content_length:
  case http::field::proxy_authenticate:
  case http::field::proxy_authentication_info:
  case http::field::proxy_authorization:
  case http::field::proxy_connection:
  case http::field::proxy_features:
  case http::field::proxy_instruction:
    return true;
  case http::field::unknown: // any other proxy-addressed field
    return name.size() >= 6 && beast::iequals(name.substr(0, 6), "proxy-");
  default:
    return false;
  }
}

// Calls `f` with each end-to-end field of `from`: hop-by-hop fields and any the Connection header
// names are left out.
template <class Fields, class F> void for_each_end_to_end(const Fields &from, F &&f) {
  std::vector<std::string_view> named; // views into `from`, which does not change meanwhile
  for (auto &field : from) {
    if (field.name() == http::field::connection) {
      for (auto token : http::token_list(field.value())) named.push_back(token);
    }
  }
  for (auto &field : from) {
    auto name = field.name_string();
    if (hop_by_hop(field.name(), name)) continue;
    bool listed = false;
    for (auto n : named) listed = listed || beast::iequals(n, name);
    if (!listed) f(field);
  }
}

// Copies end-to-end fields into a message Beast will serialize (chunked bodies).
template <class Fields> void copy_fields(const Fields &from, http::fields &to) {
  for_each_end_to_end(from, [&](auto &f) { to.insert(f.name(), f.name_string(), f.value()); });
}

// Appends end-to-end fields as "Name: value" lines of a head sluice serializes itself (sized
// bodies): one string, where a Beast message would allocate each field and walk them again.
template <class Fields> void append_fields(const Fields &from, std::string &to) {
  for_each_end_to_end(from, [&](auto &f) {
    to.append(f.name_string()).append(": ").append(f.value()).append("\r\n");
  });
}

} // namespace sluice::gateway::detail
