// A file of the tests' own under /tmp, removed when the test ends, and its lines.
#pragma once
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace sluice::metrics::testing {

struct temp_file {
  std::string path;
  temp_file() {
    char p[] = "/tmp/sluice-log-test-XXXXXX";
    int fd = ::mkstemp(p);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = p;
  }
  ~temp_file() { ::unlink(path.c_str()); }
};

inline std::vector<std::string> lines_of(const std::string &path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

} // namespace sluice::metrics::testing
