#pragma once
// The decider's two transports (client.hpp): a program on a socket pair (program.cpp) and an
// HTTPS endpoint (endpoint.cpp). Only client.cpp makes them.
#include "gateway/decider/client.hpp"

namespace sluice::gateway::decider {

std::unique_ptr<transport> make_program(const filters::decider_config &cfg, client &owner);
std::unique_ptr<transport> make_endpoint(const filters::decider_config &cfg, const filters::config &whole,
                                         client &owner);

} // namespace sluice::gateway::decider
