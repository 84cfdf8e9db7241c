#include "metrics/textfile.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace sluice::metrics {
namespace {

constexpr std::size_t max_file_bytes = 16 * 1024 * 1024;

struct family {
  std::string name, help, type;
  std::vector<std::string> order;     // series keys in first-seen order
  std::map<std::string, double> values; // series key ("name{labels}") -> value
};

struct exposition {
  std::vector<family> families;
  family &get(const std::string &name) {
    for (auto &f : families) {
      if (f.name == name) return f;
    }
    families.push_back({name, {}, {}, {}, {}});
    return families.back();
  }
};

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

// Our own format only (prometheus-cpp's serializer): "# HELP name ...", "# TYPE name type", and
// samples "name{labels} value" that follow their family's TYPE line. A line it cannot read is an
// error: the file is not ours, and merging into it would lose what it holds.
exposition parse(std::string_view text, const char *what) {
  exposition e;
  family *current = nullptr;
  for (auto line : lines_of(text)) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      auto rest = line.substr(7);
      auto sp = rest.find(' ');
      std::string name(rest.substr(0, sp));
      current = &e.get(name);
      std::string value(sp == std::string_view::npos ? "" : rest.substr(sp + 1));
      (line[2] == 'H' ? current->help : current->type) = value;
      continue;
    }
    if (line[0] == '#') continue;
    auto sp = line.rfind(' ');
    if (sp == std::string_view::npos || !current ||
        line.substr(0, current->name.size()) != current->name) {
      throw std::runtime_error(std::string(what) + ": unexpected line '" +
                               std::string(line.substr(0, 80)) + "'");
    }
    std::string key(line.substr(0, sp));
    std::string num(line.substr(sp + 1));
    char *end = nullptr;
    double v = std::strtod(num.c_str(), &end);
    if (end == num.c_str() || *end) {
      throw std::runtime_error(std::string(what) + ": bad value in '" +
                               std::string(line.substr(0, 80)) + "'");
    }
    if (!current->values.count(key)) current->order.push_back(key);
    current->values[key] = v;
  }
  return e;
}

std::string format_value(double v) {
  char buf[64];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", v);
  }
  return buf;
}

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

} // namespace

std::string merge_expositions(std::string_view current, std::string_view addition) {
  auto base = parse(current, "existing textfile");
  auto add = parse(addition, "this run's metrics");
  for (auto &f : add.families) {
    if (f.name == "sluice_connections_active") continue;
    auto &into = base.get(f.name);
    if (into.help.empty()) into.help = f.help;
    if (into.type.empty()) into.type = f.type;
    bool replace = f.type == "gauge";
    for (auto &key : f.order) {
      auto it = into.values.find(key);
      if (it == into.values.end()) {
        into.order.push_back(key);
        into.values[key] = f.values[key];
      } else {
        it->second = replace ? f.values[key] : it->second + f.values[key];
      }
    }
  }
  std::string out;
  for (auto &f : base.families) {
    if (f.name == "sluice_connections_active") continue;
    if (!f.help.empty()) out += "# HELP " + f.name + " " + f.help + "\n";
    if (!f.type.empty()) out += "# TYPE " + f.name + " " + f.type + "\n";
    for (auto &key : f.order) out += key + " " + format_value(f.values[key]) + "\n";
  }
  return out;
}

void check_textfile_dir(const std::string &dir) {
  struct stat st{};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw std::runtime_error("--metrics-textfile " + dir +
                             ": not a directory; give node_exporter's "
                             "--collector.textfile.directory (for example "
                             "/var/lib/prometheus/node-exporter)");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw std::runtime_error("--metrics-textfile " + dir + ": not writable by this user (" +
                             std::strerror(errno) +
                             "); make it writable or pick a directory the collector reads");
  }
}

void merge_into_textfile(const std::string &dir, std::string_view exposition_text) {
  std::string lock_path = dir + "/.sluice_exec.prom.lock";
  fd_closer lock{::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644)};
  if (lock.fd < 0) throw std::runtime_error("cannot open " + lock_path + ": " + std::strerror(errno));
  while (::flock(lock.fd, LOCK_EX) != 0) {
    if (errno != EINTR) throw std::runtime_error("cannot lock " + lock_path + ": " + std::strerror(errno));
  }
  std::string path = dir + "/" + std::string(textfile_name);
  std::string current;
  {
    fd_closer in{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
    if (in.fd < 0 && errno != ENOENT) {
      throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
    }
    if (in.fd >= 0) {
      char buf[65536];
      for (;;) {
        ssize_t n = ::read(in.fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
        if (n == 0) break;
        current.append(buf, static_cast<std::size_t>(n));
        if (current.size() > max_file_bytes) {
          throw std::runtime_error(path + " is larger than 16 MiB; it is not sluice's: move it away");
        }
      }
    }
  }
  std::string merged;
  try {
    merged = merge_expositions(current, exposition_text);
  } catch (const std::runtime_error &e) {
    throw std::runtime_error(path + ": " + e.what() + "; move the file away (sluice rewrites it)");
  }
  std::string tmp = path + ".tmp"; // not *.prom: the collector skips it
  fd_closer out{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644)};
  if (out.fd < 0) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  ::fchmod(out.fd, 0644); // readable by the collector whatever the umask
  std::size_t done = 0;
  while (done < merged.size()) {
    ssize_t n = ::write(out.fd, merged.data() + done, merged.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

} // namespace sluice::metrics
