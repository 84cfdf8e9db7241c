#include "adapters/settings_file.hpp"
#include "adapters/host_adapter.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::adapters {

namespace js = boost::json;
namespace fs = std::filesystem;

std::string env_or(const char *name, const std::string &fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string home() {
  std::string h = env_or("HOME", "");
  if (h.empty())
    throw std::runtime_error("HOME is not set; set it or use --scope project --dir DIR");
  return h;
}

std::string state_path(const std::string &settings) {
  std::string base = ::geteuid() == 0 && settings.rfind("/etc/", 0) == 0
                         ? std::string("/var/lib/sluice/adapters")
                         : env_or("XDG_STATE_HOME", home() + "/.local/state") + "/sluice/adapters";
  std::string name;
  for (char c : settings)
    name += (c == '/') ? '!' : c;
  return base + "/" + name + ".json";
}

std::optional<std::string> read_file(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return std::nullopt;
    throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      ::close(fd);
      throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_settings_bytes) {
      ::close(fd);
      throw std::runtime_error(path + " is larger than 4 MiB; it cannot be a settings file");
    }
  }
  ::close(fd);
  return out;
}

void write_file(const std::string &path, const std::string &data, mode_t mode_if_new) {
  struct stat st {};
  mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : mode_if_new;
  std::string tmp = path + ".sluice-tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  ::fchmod(fd, mode);
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot replace " + path + ": " + std::strerror(errno));
  }
}

namespace {

void pretty(const js::value &v, std::string &out, int indent) {
  std::string pad(static_cast<std::size_t>(indent) * 2, ' ');
  std::string inner(static_cast<std::size_t>(indent + 1) * 2, ' ');
  if (v.is_object()) {
    const auto &o = v.as_object();
    if (o.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    std::size_t i = 0;
    for (auto &kv : o) {
      out += inner + js::serialize(js::value(kv.key())) + ": ";
      pretty(kv.value(), out, indent + 1);
      out += (++i < o.size() ? ",\n" : "\n");
    }
    out += pad + "}";
  } else if (v.is_array()) {
    const auto &a = v.as_array();
    if (a.empty()) {
      out += "[]";
      return;
    }
    out += "[\n";
    for (std::size_t i = 0; i < a.size(); ++i) {
      out += inner;
      pretty(a[i], out, indent + 1);
      out += (i + 1 < a.size() ? ",\n" : "\n");
    }
    out += pad + "]";
  } else {
    out += js::serialize(v);
  }
}

} // namespace

std::string to_text(const js::value &v) {
  std::string out;
  pretty(v, out, 0);
  return out + "\n";
}

js::object parse_settings(const std::string &path, const std::optional<std::string> &text) {
  if (!text || text->find_first_not_of(" \t\r\n") == std::string::npos)
    return {};
  js::value v;
  try {
    v = js::parse(*text);
  } catch (const std::exception &e) {
    throw std::runtime_error(path + " is not valid JSON (" + e.what() +
                             "); fix it first: sluice does not overwrite a file it cannot read");
  }
  if (!v.is_object())
    throw std::runtime_error(path + " is not a JSON object; fix it first");
  return v.as_object();
}

void set_path(js::object &root, const std::vector<std::string> &path, js::value value,
              js::array &undo) {
  js::object *o = &root;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    auto &next = (*o)[path[i]];
    if (next.is_null())
      next = js::object{};
    if (!next.is_object()) {
      throw std::runtime_error("\"" + path[i] + "\" is not an object; fix the settings file first");
    }
    o = &next.as_object();
  }
  js::object entry{{"path", js::value_from(path)}, {"set", value}};
  if (auto *old = o->if_contains(path.back()))
    entry["before"] = *old;
  undo.push_back(std::move(entry));
  (*o)[path.back()] = std::move(value);
}

void undo_paths(js::object &root, const js::array &undo) {
  for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
    auto &e = it->as_object();
    auto path = js::value_to<std::vector<std::string>>(e.at("path"));
    std::vector<js::object *> chain{&root};
    bool reachable = true;
    for (std::size_t i = 0; i + 1 < path.size() && reachable; ++i) {
      auto *next = chain.back()->if_contains(path[i]);
      reachable = next && next->is_object();
      if (reachable)
        chain.push_back(&next->as_object());
    }
    if (!reachable)
      continue;
    auto &leaf = *chain.back();
    auto *now = leaf.if_contains(path.back());
    if (!e.contains("set")) { // a key install removed: back, unless the user set it again
      if (!now)
        leaf[path.back()] = e.at("before");
      continue;
    }
    if (!now || *now != e.at("set"))
      continue; // changed since: the user's value stays
    if (auto *before = e.if_contains("before")) {
      *now = *before;
    } else {
      leaf.erase(path.back());
      for (std::size_t i = chain.size() - 1; i > 0 && chain[i]->empty(); --i)
        chain[i - 1]->erase(path[i - 1]);
    }
  }
}

void note_missing_dirs(const std::string &path, std::vector<std::string> &created) {
  for (fs::path p = fs::path(path).parent_path(); !p.empty() && !fs::exists(p);
       p = p.parent_path()) {
    created.push_back(p.string());
  }
}

// What remove needs: each file before and after install, and the directories install creates.
void save_state(const std::string &state, js::object header,
                const std::vector<file_change> &changes, const std::vector<std::string> &created) {
  js::array files;
  for (auto &c : changes) {
    js::object f{{"path", c.path},
                 {"existed", c.before.has_value()},
                 {"original", c.before.value_or("")},
                 {"written", c.after}};
    if (c.owned)
      f["owned"] = true;
    if (c.replaced_line)
      f["sandbox_line_before"] = *c.replaced_line;
    if (c.undo)
      f["undo"] = *c.undo;
    files.push_back(std::move(f));
  }
  header["files"] = std::move(files);
  header["created_dirs"] = js::value_from(created);
  fs::create_directories(fs::path(state).parent_path());
  write_file(state, to_text(header), 0600);
}

void apply(const std::vector<file_change> &changes) {
  for (auto &c : changes) {
    fs::create_directories(fs::path(c.path).parent_path());
    write_file(c.path, c.after);
  }
}

void restore(const std::vector<file_change> &changes) {
  for (auto &c : changes) {
    if (c.before) {
      write_file(c.path, *c.before);
    } else {
      ::unlink(c.path.c_str());
    }
  }
}

// Puts back every file install changed: the exact original when the file is as install left it,
// otherwise only sluice's additions are taken out.
void remove_with_state(const host_adapter &h, const adapter_options &o, const std::string &state) {
  js::object st = parse_settings(state, read_file(state));
  auto *files = st.if_contains("files");
  if (!files || !files->is_array())
    throw std::runtime_error(state + ": not a sluice adapter state file");
  for (auto &f : files->as_array()) {
    auto &fo = f.as_object();
    std::string path(fo.at("path").as_string());
    std::string written(fo.at("written").as_string());
    std::string original(fo.at("original").as_string());
    bool existed = fo.at("existed").as_bool();
    auto now = read_file(path);
    if (!now)
      continue;
    bool owned = fo.contains("owned") && fo.at("owned").as_bool();
    if (owned && !existed) { // sluice's own file: it goes, edited or not
      ::unlink(path.c_str());
      continue;
    }
    if (*now == written) {
      if (existed) {
        write_file(path, original);
      } else {
        ::unlink(path.c_str());
      }
      continue;
    }
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
      js::object s = parse_settings(path, now);
      if (auto *undo = fo.if_contains("undo"); undo && undo->is_array())
        undo_paths(s, undo->as_array());
      h.strip(s, o);
      write_file(path, to_text(s));
    } else {
      write_file(path, h.strip_text(*now, fo));
    }
    std::fprintf(stderr,
                 "sluice: %s changed since the adapter was installed; removed only what "
                 "sluice added, kept the rest\n",
                 path.c_str());
  }
  if (auto *dirs = st.if_contains("created_dirs"); dirs && dirs->is_array()) {
    for (auto &d : dirs->as_array())
      ::rmdir(std::string(d.as_string()).c_str()); // only if empty
  }
  ::unlink(state.c_str());
}

} // namespace sluice::adapters
