#pragma once
// The sandbox's parts (sandbox.hpp), shared by the files that each hold one concern of it:
//   sandbox.cpp          sluice's side: the namespaces and their id maps, the id-mapped /etc, the
//                        conversation with init up to the command's start and its end
//   sandbox_channel.cpp  the control socket between sluice and init: messages, descriptors, files
//   sandbox_network.cpp  the sandbox's network: listeners, and capture's routes and DNS sockets
//   sandbox_init.cpp     init, PID 1 of the sandbox: its stages, then the command and its reaping
// Private to exec/: nothing outside includes it.
#include "exec/sandbox.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::exec::detail {

// The largest message on the control socket: sluice's files for the view (a CA certificate and a
// JVM trust store, a few KiB).
inline constexpr std::size_t max_message = 256 * 1024;

// The most descriptors one message carries: the proxy listener, two DNS sockets and two listeners
// (IPv4, IPv6) per captured port (SCM_MAX_FD is 253).
inline constexpr std::size_t max_fds = 3 + 2 * max_capture_ports;

// sandbox_channel.cpp
// Sends a one-byte code, an optional text and descriptors on the control socket.
bool send_msg(int sock, char code, const std::string &text = {}, const std::vector<int> &fds = {});
// Receives one message and the descriptors passed with it. Waits at most `timeout_ms`.
bool recv_msg(int sock, std::string &out, std::vector<int> &fds, int timeout_ms);
// No descriptor is expected: any that came anyway is closed.
bool recv_msg(int sock, std::string &out, int timeout_ms);
std::string encode_files(const std::vector<std::pair<std::string, std::string>> &files);
bool decode_files(std::string_view in, std::vector<std::pair<std::string, std::string>> &files);

// sandbox_network.cpp
// A TCP listener of `family` on `port` of loopback or of the wildcard address, or -1 with `err` set.
int tcp_listener(int family, bool loopback, unsigned port, int backlog, std::string &err);
// Transparent capture's network, its sockets appended to `out`; empty, or what failed.
std::string make_capture(const std::vector<unsigned> &ports, std::vector<int> &out);

// sandbox_init.cpp
// PID 1 of the sandbox, in the child of the namespaces' clone: never returns.
[[noreturn]] void init_main(const sandbox_options &o, int control, int exec_pipe_w);

} // namespace sluice::exec::detail
