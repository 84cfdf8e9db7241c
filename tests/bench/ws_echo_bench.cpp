// WebSocket echo over TLS, both ends in C++ (Beast), so that neither the client nor the origin is
// what a benchmark of a relay measures (issue #56, item 4: the python client was the bottleneck).
//
//   ws_echo_bench server ADDRESS PORT CERT KEY
//     echoes every message on every connection (a thread each), TLS with CERT and KEY; prints
//     "ready" once listening.
//   ws_echo_bench client URL [--messages N] [--connections C] [--window W] [--size B]
//                            [--ca FILE] [--proxy HOST:PORT]
//     C connections (a thread each) to URL (wss://HOST:PORT/PATH), directly or through an HTTP
//     proxy by CONNECT, each sending N/C binary messages of B bytes with at most W awaiting their
//     echo, every echo checked; prints one JSON line: messages, seconds (first send to last echo),
//     messages per second, and the client's CPU seconds.
// Exits 1 with a message naming what failed (a refused CONNECT, a bad certificate, a wrong echo).
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/buffers_iterator.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/url/parse.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

namespace net = boost::asio;
namespace ssl = net::ssl;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
using wss = websocket::stream<ssl::stream<tcp::socket>>;

namespace {

[[noreturn]] void die(const std::string &why) {
  std::fprintf(stderr, "ws_echo_bench: %s\n", why.c_str());
  std::exit(1);
}

void serve_one(tcp::socket sock, ssl::context &ctx) {
  try {
    wss ws(std::move(sock), ctx);
    ws.next_layer().handshake(ssl::stream_base::server);
    ws.set_option(websocket::stream_base::decorator([](websocket::response_type &) {}));
    ws.accept();
    ws.auto_fragment(false);
    beast::flat_buffer buf;
    for (;;) {
      ws.read(buf);
      ws.binary(ws.got_binary());
      ws.write(buf.data());
      buf.consume(buf.size());
    }
  } catch (const std::exception &) {
    // the client closed, or broke the protocol: this connection ends, the server goes on
  }
}

int server(int argc, char **argv) {
  if (argc != 6) die("usage: ws_echo_bench server ADDRESS PORT CERT KEY");
  ssl::context ctx(ssl::context::tls_server);
  ctx.use_certificate_chain_file(argv[4]);
  ctx.use_private_key_file(argv[5], ssl::context::pem);
  net::io_context ioc;
  tcp::acceptor acceptor(ioc, {net::ip::make_address(argv[2]), static_cast<unsigned short>(std::atoi(argv[3]))});
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) {
    tcp::socket s(ioc);
    acceptor.accept(s);
    s.set_option(tcp::no_delay(true));
    std::thread(serve_one, std::move(s), std::ref(ctx)).detach();
  }
}

struct options {
  std::string host, port, path, ca, proxy;
  long messages = 20000, connections = 4, window = 16, size = 100;
};

// A TCP connection to the origin: directly, or a tunnel through the proxy (CONNECT, then 200).
tcp::socket open(net::io_context &ioc, const options &o) {
  tcp::resolver resolver(ioc);
  tcp::socket s(ioc);
  if (o.proxy.empty()) {
    net::connect(s, resolver.resolve(o.host, o.port));
  } else {
    auto colon = o.proxy.rfind(':');
    if (colon == std::string::npos) die("--proxy " + o.proxy + ": give HOST:PORT");
    net::connect(s, resolver.resolve(o.proxy.substr(0, colon), o.proxy.substr(colon + 1)));
    std::string connect = "CONNECT " + o.host + ":" + o.port + " HTTP/1.1\r\nHost: " + o.host + ":" + o.port + "\r\n\r\n";
    net::write(s, net::buffer(connect));
    net::streambuf head;
    const std::size_t n = net::read_until(s, head, "\r\n\r\n");
    const auto begin = net::buffers_begin(head.data());
    const std::string text(begin, begin + static_cast<std::ptrdiff_t>(n));
    if (text.rfind("HTTP/1.1 200", 0) != 0) {
      die("the proxy refused CONNECT " + o.host + ":" + o.port + ": " + text.substr(0, text.find('\r')));
    }
    if (head.size() > n) die("the proxy sent bytes after its 200 before the TLS handshake");
  }
  s.set_option(tcp::no_delay(true));
  return s;
}

void run_connection(const options &o, ssl::context &ctx, long count, std::atomic<int> &ready, std::atomic<bool> &go,
                    std::string &error) {
  try {
    net::io_context ioc;
    wss ws(open(ioc, o), ctx);
    if (!SSL_set_tlsext_host_name(ws.next_layer().native_handle(), o.host.c_str())) die("SNI");
    ws.next_layer().set_verify_callback(ssl::host_name_verification(o.host));
    ws.next_layer().handshake(ssl::stream_base::client);
    ws.handshake(o.host + ":" + o.port, o.path);
    ws.binary(true);
    ws.auto_fragment(false);
    const std::string msg(static_cast<std::size_t>(o.size), 'x');
    beast::flat_buffer buf;
    ++ready;
    while (!go) std::this_thread::yield();
    long sent = 0, got = 0;
    while (got < count) {
      while (sent < count && sent - got < o.window) {
        ws.write(net::buffer(msg));
        ++sent;
      }
      ws.read(buf);
      if (buf.size() != msg.size()) throw std::runtime_error("an echo of " + std::to_string(buf.size()) + " bytes");
      buf.consume(buf.size());
      ++got;
    }
    ws.close(websocket::close_code::normal);
  } catch (const std::exception &e) {
    error = e.what();
    ++ready;
  }
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int client(int argc, char **argv) {
  if (argc < 3) die("usage: ws_echo_bench client wss://HOST:PORT/PATH [--messages N] [--connections C] ...");
  options o;
  auto url = boost::urls::parse_uri(argv[2]);
  if (!url || url->scheme() != "wss" || url->host().empty()) die(std::string("not a wss:// URL: ") + argv[2]);
  o.host = url->host();
  o.port = url->has_port() ? std::string(url->port()) : "443";
  o.path = url->path().empty() ? "/" : std::string(url->path());
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--messages") o.messages = std::atol(v.c_str());
    else if (k == "--connections") o.connections = std::atol(v.c_str());
    else if (k == "--window") o.window = std::atol(v.c_str());
    else if (k == "--size") o.size = std::atol(v.c_str());
    else if (k == "--ca") o.ca = v;
    else if (k == "--proxy") o.proxy = v;
    else die("unknown option " + k);
  }
  if (o.connections < 1 || o.window < 1 || o.messages < o.connections) die("--messages must be at least --connections");
  ssl::context ctx(ssl::context::tls_client);
  ctx.set_verify_mode(ssl::verify_peer);
  if (o.ca.empty()) {
    ctx.set_default_verify_paths();
  } else {
    ctx.load_verify_file(o.ca);
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::string> errors(static_cast<std::size_t>(o.connections));
  std::vector<std::thread> threads;
  const long each = o.messages / o.connections;
  for (long c = 0; c < o.connections; ++c) {
    threads.emplace_back(run_connection, std::cref(o), std::ref(ctx), each, std::ref(ready), std::ref(go),
                         std::ref(errors[static_cast<std::size_t>(c)]));
  }
  while (ready < o.connections) std::this_thread::yield();
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  go = true;
  for (auto &t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto &e : errors) {
    if (!e.empty()) die("a connection failed: " + e);
  }
  const long total = each * o.connections;
  std::printf("{\"messages\": %ld, \"seconds\": %.4f, \"rate\": %.1f, \"client_cpu\": %.4f}\n", total, seconds,
              static_cast<double>(total) / seconds, cpu_seconds() - cpu0);
  return 0;
}

} // namespace

int main(int argc, char **argv) try {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "server") return server(argc, argv);
  if (mode == "client") return client(argc, argv);
  die("usage: ws_echo_bench server ADDRESS PORT CERT KEY | client URL [options]");
} catch (const std::exception &e) {
  die(e.what());
}
