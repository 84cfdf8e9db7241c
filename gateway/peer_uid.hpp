#pragma once
#include "gateway/net.hpp"

#include <optional>

namespace sluice::gateway {

// The user owning the client end of an accepted loopback TCP connection, asked of the kernel
// (NETLINK_SOCK_DIAG, an exact lookup of the peer socket by its four-tuple). nullopt when the
// kernel does not know it: the peer is on another machine, or already gone.
std::optional<unsigned> loopback_peer_uid(const tcp::socket &accepted);

} // namespace sluice::gateway
