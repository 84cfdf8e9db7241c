#pragma once
#include <boost/asio/ip/address.hpp>
#include <vector>

namespace sluice::gateway {

// Addresses of this host's interfaces (getifaddrs), so that the classifier can refuse the gateway's
// own host even on a public address.
std::vector<boost::asio::ip::address> local_addresses();

} // namespace sluice::gateway
