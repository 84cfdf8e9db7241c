#include "adapters/agent.hpp"
#include "exec/environment.hpp"
#include "exec/mount_view.hpp"
#include "exec/profile_resolver.hpp"

#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <limits.h>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

namespace sluice::adapters {
namespace {

using exec::refusal;

std::string env(const char *name) {
  const char *v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string on_path(const std::string &name) {
  std::string path = env("PATH");
  std::size_t start = 0;
  while (start <= path.size()) {
    auto end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && dir[0] == '/') {
      std::string cand = dir + "/" + name;
      struct stat st {};
      if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(cand.c_str(), X_OK) == 0) return cand;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return {};
}

// The model endpoint as the gateway sees it: the host pattern (with the port when the URL names
// one) and the path the API lives under ("" or "/prefix").
struct endpoint {
  std::string url, pattern, base;
};

endpoint parse_endpoint(const std::string &url, const std::string &from) {
  auto u = boost::urls::parse_uri(url);
  if (!u || (u->scheme() != "http" && u->scheme() != "https") || u->host().empty() || u->has_userinfo() ||
      u->has_query() || u->has_fragment()) {
    throw refusal("the model URL '" + url + "' (" + from + ") is not an http(s) URL with a host and no "
                  "credentials, query or fragment; give one with --model-url, e.g. https://api.anthropic.com");
  }
  endpoint e;
  e.url = url;
  e.pattern = std::string(u->host());
  std::transform(e.pattern.begin(), e.pattern.end(), e.pattern.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (u->has_port()) e.pattern += ":" + std::string(u->port());
  e.base = std::string(u->path());
  while (!e.base.empty() && e.base.back() == '/') e.base.pop_back();
  return e;
}

std::string read_small(const std::string &path, std::size_t limit) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::string out(limit + 1, '\0');
  f.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<std::size_t>(f.gcount()));
  if (out.size() > limit) {
    throw refusal(path + " is over " + std::to_string(limit >> 20) + " MiB; sluice copies it into the "
                  "boundary and will not copy that much: trim it (old projects) and run again");
  }
  return out;
}

// A key of the host's state file that may hold a secret (a stored API key, a token): left out of
// the copy that goes inside.
bool secret_key(std::string_view key) {
  std::string k(key);
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (auto part : {"apikey", "api_key", "token", "secret", "password", "credential", "oauth"}) {
    if (k.find(part) != std::string::npos) return true;
  }
  return false;
}

// Claude Code: `claude` on PATH; state in ~/.claude (or $CLAUDE_CONFIG_DIR) and ~/.claude.json;
// the Anthropic Messages API at ANTHROPIC_BASE_URL (default https://api.anthropic.com), its key
// from ANTHROPIC_API_KEY (x-api-key) or ANTHROPIC_AUTH_TOKEN (Bearer).
exec::host_boundary claude_boundary(const agent_request &r, const std::string &home, std::string &binary) {
  binary = on_path("claude");
  if (binary.empty()) {
    throw refusal("claude is not on PATH; install Claude Code (npm install -g @anthropic-ai/claude-code) "
                  "or put its directory on PATH");
  }
  exec::host_boundary b;
  b.host = "claude";
  std::string from = "--model-url";
  std::string url = r.model_url;
  if (url.empty() && !env("ANTHROPIC_BASE_URL").empty()) {
    url = env("ANTHROPIC_BASE_URL");
    from = "ANTHROPIC_BASE_URL";
  }
  if (url.empty()) {
    url = "https://api.anthropic.com";
    from = "Claude Code's default";
  }
  endpoint e = parse_endpoint(url, from);
  b.allow.push_back(e.pattern);
  filters::route_rule api;
  api.host = e.pattern;
  api.methods = {"POST"};
  api.paths = {e.base + "/v1/messages", e.base + "/v1/messages/*"};
  api.text = filters::describe_route(api);
  b.routes.push_back(api);

  filters::credential_config key;
  key.name = "claude-model";
  key.hosts = {e.pattern};
  if (!env("ANTHROPIC_API_KEY").empty()) {
    key.source = "env:ANTHROPIC_API_KEY";
    key.header = "x-api-key";
    key.format = "{}";
    key.env = "ANTHROPIC_API_KEY";
  } else if (!env("ANTHROPIC_AUTH_TOKEN").empty()) {
    key.source = "env:ANTHROPIC_AUTH_TOKEN";
    key.header = "Authorization";
    key.format = "Bearer {}";
    key.env = "ANTHROPIC_AUTH_TOKEN";
  } else {
    throw refusal("sluice agent claude needs the model's key in ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN): "
                  "the gateway adds it to the requests for " + e.pattern + " and Claude inside holds a "
                  "placeholder; a login stored by `claude /login` is not taken inside. Export the key and run again");
  }
  b.credentials.push_back(key);
  b.set_env.push_back("ANTHROPIC_BASE_URL=" + e.url);
  b.set_env.push_back("DISABLE_AUTOUPDATER=1"); // its install is read-only inside
  // Claude's own word for "this process is in a sandbox": it then takes --dangerously-skip-permissions
  // from a root caller too (the boundary is sluice's, whatever Claude's permission mode).
  b.set_env.push_back("IS_SANDBOX=1");

  std::string dir = env("CLAUDE_CONFIG_DIR");
  if (dir.empty()) dir = home + "/.claude";
  if (dir[0] != '/') throw refusal("CLAUDE_CONFIG_DIR=" + dir + " is not an absolute path; fix it");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw refusal("cannot make Claude Code's state directory " + dir + ": " + std::strerror(errno));
  }
  char real[PATH_MAX];
  if (!::realpath(dir.c_str(), real)) throw refusal("cannot resolve " + dir + ": " + std::strerror(errno));
  dir = real;
  if (dir == home || !exec::is_under(dir, home)) {
    throw refusal("Claude Code's state directory " + dir + " is not inside the home " + home +
                  "; sluice agent shows only the home's own state inside");
  }
  b.state.push_back(dir);
  // Settings, hooks and what runs with them (plugins, skills, agents, commands) are read-only.
  // Their directories are made when missing, so that they can be (Claude makes some at start);
  // a settings file made inside is moved aside when the host ends.
  for (auto name : {"hooks", "skills", "agents", "commands", "plugins", "output-styles"}) {
    std::string d = dir + "/" + name;
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
      throw refusal("cannot make " + d + ": " + std::strerror(errno));
    }
    b.protect.push_back(d);
  }
  for (auto name : {"settings.json", "settings.local.json", "CLAUDE.md", "keybindings.json", "managed-settings.json"}) {
    b.protect.push_back(dir + "/" + name);
  }
  b.hide.push_back(dir + "/.credentials.json");
  // ~/.claude.json (onboarding, trusted folders, MCP servers) is a copy inside, without keys that
  // may hold secrets: what the host writes to it stays inside.
  std::string state_file = env("CLAUDE_CONFIG_DIR").empty() ? home + "/.claude.json" : dir + "/.claude.json";
  if (exec::is_under(state_file, home) && !exec::is_under(state_file, dir)) {
    std::string text = read_small(state_file, 8u << 20);
    if (!text.empty()) {
      boost::system::error_code ec;
      auto v = boost::json::parse(text, ec);
      if (!ec && v.is_object()) {
        auto &o = v.as_object();
        for (auto it = o.begin(); it != o.end();) {
          it = secret_key(it->key()) ? o.erase(it) : std::next(it);
        }
        b.home_files.emplace_back(state_file, boost::json::serialize(v));
      }
    }
  }
  for (char **e = environ; *e; ++e) {
    std::string_view kv(*e);
    std::string name(kv.substr(0, kv.find('=')));
    for (auto prefix : {"CLAUDE_", "ANTHROPIC_", "DISABLE_"}) {
      if (name.rfind(prefix, 0) == 0 && !exec::is_credential_name(name)) b.keep_env.push_back(name);
    }
  }
  return b;
}

} // namespace

exec::exec_options agent_exec_options(const agent_request &r) {
  exec::exec_options ex = r.ex;
  std::string home = env("HOME");
  char real[PATH_MAX];
  if (home.empty() || home[0] != '/' || !::realpath(home.c_str(), real) || std::string(real) == "/") {
    throw refusal("sluice agent needs HOME to name the caller's home directory (HOME=" + home + "); set it");
  }
  home = real;
  std::string binary;
  if (r.host == "claude") {
    ex.agent = claude_boundary(r, home, binary);
  } else if (r.host == "codex" || r.host == "opencode" || r.host == "pi") {
    throw refusal("sluice agent runs claude so far; " + r.host + " runs its shell through sluice exec with "
                  "`sluice adapter install " + r.host + "` (docs/adapters.md)");
  } else {
    throw refusal("unknown agent host '" + r.host + "'; use claude (codex, opencode and pi: sluice adapter install)");
  }
  // The default profile of the whole agent is network-read: the model endpoint is a route of its own.
  if (!ex.request.profile) ex.request.profile = filters::profile::network_read;
  ex.argv = {binary};
  ex.argv.insert(ex.argv.end(), r.args.begin(), r.args.end());
  return ex;
}

int run_agent(const agent_request &r) { return exec::run_exec(agent_exec_options(r)); }

} // namespace sluice::adapters
