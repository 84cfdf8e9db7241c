#pragma once
// One pass of DEFLATE input through Beast's inflater, each piece of output handed on as it comes:
// the loop that gzip and deflate bodies (body.cpp) and permessage-deflate WebSocket messages
// (gateway/websocket/frames.cpp) share. No I/O.
#include <boost/beast/zlib/inflate_stream.hpp>

#include <cstddef>

namespace sluice::scan {

// Why a pass ended.
enum class inflated {
  input_taken, // all of zs's input is taken and all output handed on: give it more
  stream_end,  // the DEFLATE stream's final block ended; zs's input holds what follows it
  not_deflate, // the input is not DEFLATE
  stopped,     // `emit` returned false
};

// Inflates from zs's input (next_in, avail_in: the caller's) into `out`, calling
// emit(const char *piece, std::size_t n) for each piece produced, until one of the ends above.
template <class Emit>
inflated inflate_pass(boost::beast::zlib::inflate_stream &z, boost::beast::zlib::z_params &zs, char *out,
                      std::size_t out_size, boost::beast::zlib::Flush flush, Emit &&emit) {
  namespace zlib = boost::beast::zlib;
  for (;;) {
    zs.next_out = out;
    zs.avail_out = out_size;
    boost::system::error_code ec;
    z.write(zs, flush, ec);
    const std::size_t produced = out_size - zs.avail_out;
    if (produced && !emit(static_cast<const char *>(out), produced)) return inflated::stopped;
    if (ec == zlib::error::end_of_stream) return inflated::stream_end;
    if (ec == zlib::error::need_buffers) return inflated::input_taken;
    if (ec) return inflated::not_deflate;
    if (zs.avail_in == 0 && zs.avail_out != 0) return inflated::input_taken;
  }
}

} // namespace sluice::scan
