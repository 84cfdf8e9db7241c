// Claude Code: a PreToolUse hook in settings.json (user, project or managed scope) for Bash and
// Monitor, or proxy mode (Claude's own sandbox with `sluice serve` as its proxy).
#include "adapters/hook.hpp"
#include "adapters/host_adapter.hpp"
#include "certs/ca_files.hpp"
#include "filters/policy_loader.hpp"

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace sluice::adapters {
namespace {

namespace js = boost::json;
namespace fs = std::filesystem;

constexpr const char *claude_matcher = "Bash|Monitor";

std::string excluded_pattern(const adapter_options &o) {
  return shell_word(o.sluice_path) + " exec:*";
}

// Claude Code's version from the AI_AGENT it sets for hooks: "claude-code_2-1-332_harness" (from
// 2.1.128) or "claude-code/2.1.120/harness" (2.1.120 to 2.1.126); empty when the variable is
// absent (before 2.1.120) or has another shape.
std::string claude_version_from_env() {
  const char *v = std::getenv("AI_AGENT");
  if (!v)
    return {};
  std::string_view s(v);
  constexpr std::string_view prefix = "claude-code";
  if (s.substr(0, prefix.size()) != prefix || s.size() <= prefix.size())
    return {};
  char sep = s[prefix.size()];
  if (sep != '_' && sep != '/')
    return {};
  s.remove_prefix(prefix.size() + 1);
  std::string out;
  for (char c : s) {
    if (c == sep)
      break;
    if (c == (sep == '_' ? '-' : '.')) {
      out += '.';
    } else if (c >= '0' && c <= '9') {
      out += c;
    } else {
      return {};
    }
  }
  return out;
}

// The CA variables Claude passes into its sandbox from the settings' env block: every client the
// sandbox runs must trust sluice's CA, and Claude sets none of them for a custom proxy.
const char *const ca_variables[] = {"SSL_CERT_FILE",       "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE",
                                    "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT",
                                    "AWS_CA_BUNDLE",       "DENO_CERT"};

unsigned loopback_port(const std::string &listen, const std::string &config) {
  auto colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host != "127.0.0.1" && host != "localhost" && host != "[::1]") {
    throw std::runtime_error(config + ": [listen] proxy is " + listen +
                             "; Claude Code reaches its "
                             "proxy on localhost only: listen on 127.0.0.1:PORT");
  }
  return static_cast<unsigned>(std::stoul(listen.substr(colon + 1)));
}

void install_claude_proxy(const adapter_options &o, const std::string &path,
                          const std::string &state) {
  if (o.serve_config.empty() || o.ca_bundle.empty()) {
    throw std::runtime_error("--mode proxy needs --config FILE (the `sluice serve` config) and "
                             "--ca-bundle FILE (what `sluice serve --ca-bundle-out FILE` writes)");
  }
  auto cfg = filters::load_config_file(o.serve_config);
  unsigned port = 0;
  if (o.agent.empty()) {
    port = loopback_port(cfg.proxy_listen, o.serve_config);
  } else {
    // The agent's own listener: its traffic is named in sluice's log and metrics, and other users'
    // processes cannot use it.
    auto it = std::find_if(cfg.agents.begin(), cfg.agents.end(),
                           [&](const filters::agent_listener &a) { return a.name == o.agent; });
    if (it == cfg.agents.end()) {
      throw std::runtime_error(o.serve_config + " has no [listen.agents." + o.agent +
                               "]; add one, e.g.\n"
                               "  [listen.agents." +
                               o.agent + "]\n  address = \"127.0.0.1:3129\"\n  uids = [" +
                               std::to_string(::getuid()) + "]\nand restart sluice serve");
    }
    if (std::find(it->uids.begin(), it->uids.end(), ::getuid()) == it->uids.end()) {
      throw std::runtime_error("[listen.agents." + o.agent + "] in " + o.serve_config +
                               " does not list uid " + std::to_string(::getuid()) +
                               " (this user) in uids: sluice would refuse "
                               "Claude Code's connections; add it and restart sluice serve");
    }
    port = loopback_port(it->address, o.serve_config);
  }
  std::string bundle = fs::absolute(o.ca_bundle).lexically_normal().string();
  std::vector<file_change> changes;
  if (!fs::exists(bundle)) {
    if (cfg.ca_cert.empty()) {
      throw std::runtime_error(bundle +
                               " does not exist and the serve config has no [tls] ca_cert: start "
                               "`sluice serve --config " +
                               o.serve_config + " --ca-bundle-out " + bundle +
                               "` first (its CA is new at every start)");
    }
    auto ca = read_file(cfg.ca_cert);
    if (!ca)
      throw std::runtime_error("cannot read [tls] ca_cert " + cfg.ca_cert);
    changes.push_back({bundle, std::nullopt, certs::system_trust_bundle() + *ca});
    changes.back().owned = true;
  }
  auto before = read_file(path);
  js::object s = parse_settings(path, before);
  js::array undo;
  for (const char *v : ca_variables)
    set_path(s, {"env", v}, js::string(bundle), undo);
  set_path(s, {"sandbox", "enabled"}, true, undo);
  set_path(s, {"sandbox", "failIfUnavailable"}, true, undo);
  set_path(s, {"sandbox", "autoAllowBashIfSandboxed"}, true, undo);
  set_path(s, {"sandbox", "allowUnsandboxedCommands"}, false, undo);
  // Both proxies: with only the HTTP one, Claude's own SOCKS proxy stays up and obeys its own
  // allowedDomains, which would let any method through to a listed domain.
  set_path(s, {"sandbox", "network", "httpProxyPort"}, port, undo);
  set_path(s, {"sandbox", "network", "socksProxyPort"}, port, undo);
  if (auto *sb = s.if_contains("sandbox"); sb && sb->is_object()) {
    if (auto *net = sb->as_object().if_contains("network"); net && net->is_object()) {
      if (auto *domains = net->as_object().if_contains("allowedDomains")) {
        // They no longer apply to traffic sent to a custom proxy: sluice's policy decides. Removed,
        // and put back by remove.
        undo.push_back(js::object{{"path", js::value_from(std::vector<std::string>{
                                               "sandbox", "network", "allowedDomains"})},
                                  {"before", *domains}});
        net->as_object().erase("allowedDomains");
      }
    }
  }
  if (!cfg.ca_key.empty()) {
    // A persistent CA key must stay out of the sandbox's reach.
    auto &fsys = s["sandbox"].as_object()["filesystem"];
    if (fsys.is_null())
      fsys = js::object{};
    auto &deny = fsys.as_object()["denyRead"];
    js::array list = deny.is_array() ? deny.as_array() : js::array{};
    list.push_back(js::string(fs::absolute(cfg.ca_key).string()));
    set_path(s, {"sandbox", "filesystem", "denyRead"}, std::move(list), undo);
  }
  changes.push_back({path, before, to_text(s)});
  changes.back().undo = std::move(undo);
  std::vector<std::string> created;
  note_missing_dirs(path, created);
  save_state(state, {{"host", o.host}, {"mode", "proxy"}, {"serve_config", o.serve_config}},
             changes, created);
  apply(changes);
}

// GET http://127.0.0.1:PORT/PATH with a 2 s deadline; the body, or nullopt.
std::optional<std::string> local_get(const std::string &listen, const std::string &target) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos)
    return std::nullopt;
  std::string host = listen.substr(0, colon);
  if (host == "localhost")
    host = "127.0.0.1";
  if (!host.empty() && host.front() == '[')
    host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(host, ec);
  if (ec)
    return std::nullopt;
  int fd = ::socket(addr.is_v6() ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return std::nullopt;
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  boost::asio::ip::tcp::endpoint ep(
      addr, static_cast<unsigned short>(std::stoul(listen.substr(colon + 1))));
  bool ok = ::connect(fd, ep.data(), static_cast<socklen_t>(ep.size())) == 0;
  std::string out;
  if (ok && !target.empty()) {
    std::string req = "GET " + target + " HTTP/1.0\r\nHost: sluice\r\n\r\n";
    ok = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
    char buf[16384];
    for (ssize_t n; ok && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
      out.append(buf, static_cast<std::size_t>(n));
      if (out.size() > max_settings_bytes)
        break;
    }
    auto body = out.find("\r\n\r\n");
    ok = out.rfind("HTTP/1.", 0) == 0 && out.find(" 200 ") == 8 && body != std::string::npos;
    if (ok)
      out = out.substr(body + 4);
  }
  ::close(fd);
  if (!ok)
    return std::nullopt;
  return out;
}

// Proxy mode: what keeps it working, checked where it can be.
void check_proxy_mode(adapter_state &a, const js::object &s, const std::string &state_file) {
  auto *sb = s.if_contains("sandbox");
  auto *net = sb && sb->is_object() ? sb->as_object().if_contains("network") : nullptr;
  if (!net || !net->is_object())
    return;
  auto &n = net->as_object();
  auto *http_port = n.if_contains("httpProxyPort");
  if (!http_port || !http_port->is_number())
    return;
  a.mode = "proxy";
  unsigned port = static_cast<unsigned>(http_port->to_number<double>());
  auto *socks = n.if_contains("socksProxyPort");
  if (n.contains("allowedDomains") && !socks) {
    a.warnings.push_back(
        "sandbox.network.allowedDomains without socksProxyPort: Claude's own SOCKS "
        "proxy lets any method through to those domains, past sluice; set "
        "socksProxyPort to sluice's port (sluice adapter install claude --mode proxy)");
  }
  if (socks && socks->is_number() && static_cast<unsigned>(socks->to_number<double>()) != port) {
    a.warnings.push_back(
        "socksProxyPort differs from httpProxyPort: SOCKS traffic does not reach sluice");
  }
  bool answering = local_get("127.0.0.1:" + std::to_string(port), "").has_value();
  if (!answering) {
    a.warnings.push_back(
        "nothing answers on 127.0.0.1:" + std::to_string(port) +
        ": Claude starts anyway "
        "and every command fails with 'Proxy CONNECT aborted'; start sluice serve");
  }
  std::string bundle_path;
  if (auto *env = s.if_contains("env"); env && env->is_object()) {
    if (auto *b = env->as_object().if_contains("SSL_CERT_FILE"); b && b->is_string())
      bundle_path = b->as_string();
  }
  auto bundle = bundle_path.empty() ? std::nullopt : read_file(bundle_path);
  bool current = bundle.has_value();
  if (bundle_path.empty() || !bundle) {
    a.warnings.push_back(
        "no CA bundle for the sandbox (env SSL_CERT_FILE " +
        (bundle_path.empty() ? std::string("unset") : bundle_path + " missing") +
        "): clients inside will refuse sluice's certificates; start serve with --ca-bundle-out");
  } else if (auto st = read_file(state_file)) {
    // The CA serve uses now must be in the bundle; an ephemeral CA changes at every start.
    try {
      auto sto = parse_settings(state_file, st);
      if (auto *conf = sto.if_contains("serve_config"); conf && conf->is_string()) {
        auto cfg = filters::load_config_file(std::string(conf->as_string()));
        if (!cfg.admin_listen.empty()) {
          auto pem = local_get(cfg.admin_listen, "/ca.pem");
          if (pem && bundle->find(*pem) == std::string::npos) {
            current = false;
            a.warnings.push_back(
                bundle_path +
                " does not hold the CA sluice serves now (stale: an "
                "ephemeral CA is new at every start); restart serve with --ca-bundle-out " +
                bundle_path + " or give it a persistent CA ([tls] ca_cert)");
          }
        }
      }
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
    }
  }
  a.installed = true;
  a.hook_verified = answering && current;
}

class claude_adapter final : public host_adapter {
public:
  std::string_view name() const override { return "claude"; }
  std::string_view minimum() const override { return "2.0.10"; }

  void check_scope(const adapter_options &o) const override {
    if (o.scope != "user" && o.scope != "project" && o.scope != "managed") {
      throw std::runtime_error("unknown --scope '" + o.scope + "'; use user, project or managed");
    }
  }

  std::string settings_path(const adapter_options &o) const override {
    if (o.scope == "user")
      return env_or("CLAUDE_CONFIG_DIR", home() + "/.claude") + "/settings.json";
    if (o.scope == "project")
      return project_dir(o) + "/.claude/settings.json";
    return "/etc/claude-code/managed-settings.json";
  }

  std::string skill_path(const adapter_options &o) const override {
    if (o.scope == "user")
      return env_or("CLAUDE_CONFIG_DIR", home() + "/.claude") + "/skills/sluice/SKILL.md";
    if (o.scope == "project")
      return project_dir(o) + "/.claude/skills/sluice/SKILL.md";
    return {};
  }

  // Proxy mode: Claude's sandbox isolates, not sluice exec.
  bool needs_preflight(const adapter_options &o) const override { return o.mode != "proxy"; }

  void install(const adapter_options &o, const std::string &path,
               const std::string &state) const override {
    if (o.mode == "proxy") {
      install_claude_proxy(o, path, state);
      return;
    }
    if (o.mode != "hook")
      throw std::runtime_error("--mode " + o.mode + " is hook or proxy");
    auto before = read_file(path);
    js::object s = parse_settings(path, before);
    if (auto *d = s.if_contains("disableAllHooks"); d && d->is_bool() && d->as_bool()) {
      throw std::runtime_error(path +
                               " sets \"disableAllHooks\": true, which would switch the sluice "
                               "hook off; remove that setting first");
    }
    strip(s, o); // an entry left by hand or by an older install
    pre_tool_use(s, true)->push_back(hook_entry(o, claude_matcher));
    // Claude's own sandbox cannot nest sluice's namespaces: the rewritten commands run outside it,
    // with sluice as the boundary.
    auto &sandbox = s["sandbox"];
    if (!sandbox.is_object()) {
      if (!sandbox.is_null())
        throw std::runtime_error(path + ": \"sandbox\" is not an object; fix it first");
      sandbox = js::object{};
    }
    auto &excluded = sandbox.as_object()["excludedCommands"];
    if (excluded.is_null())
      excluded = js::array{};
    if (!excluded.is_array()) {
      throw std::runtime_error(path +
                               ": \"sandbox.excludedCommands\" is not an array; fix it first");
    }
    excluded.as_array().push_back(js::string(excluded_pattern(o)));
    std::vector<file_change> changes{{path, before, to_text(s)}};
    std::vector<std::string> created;
    note_missing_dirs(path, created);
    add_skill(*this, o, changes, created);
    save_state(state, {{"host", o.host}}, changes, created);
    apply(changes);
  }

  void strip(js::object &s, const adapter_options &o) const override {
    strip_hooks(s);
    if (auto *sb = s.if_contains("sandbox"); sb && sb->is_object()) {
      auto &sbo = sb->as_object();
      if (auto *ex = sbo.if_contains("excludedCommands"); ex && ex->is_array()) {
        js::array kept;
        for (auto &e : ex->as_array()) {
          if (!(e.is_string() && e.as_string() == excluded_pattern(o)))
            kept.push_back(e);
        }
        ex->as_array() = std::move(kept);
        if (ex->as_array().empty())
          sbo.erase("excludedCommands");
      }
      if (sbo.empty())
        s.erase("sandbox");
    }
  }

  std::string installed_hook(const adapter_options &, adapter_state &a) const override {
    js::object s;
    try {
      s = parse_settings(a.settings, read_file(a.settings));
    } catch (const std::exception &e) {
      a.warnings.push_back(e.what());
    }
    std::string cmd = installed_hook_command(s);
    a.installed = !cmd.empty();
    return cmd;
  }

  void check(const adapter_options &, adapter_state &a, const std::string &) const override {
    if (!a.installed) {
      try {
        check_proxy_mode(a, parse_settings(a.settings, read_file(a.settings)),
                         state_path(a.settings));
      } catch (const std::exception &) { // installed_hook has said what is wrong with the file
      }
    }
    // Settings that switch the hook off or keep it from deciding.
    std::vector<std::string> others = {
        env_or("CLAUDE_CONFIG_DIR", env_or("HOME", "/nonexistent") + "/.claude") + "/settings.json",
        fs::current_path().string() + "/.claude/settings.json",
        fs::current_path().string() + "/.claude/settings.local.json"};
    for (auto &p : others) {
      try {
        auto t = read_file(p);
        if (!t)
          continue;
        auto so = parse_settings(p, t);
        if (auto *d = so.if_contains("disableAllHooks"); d && d->is_bool() && d->as_bool()) {
          a.warnings.push_back(p +
                               " sets disableAllHooks: the hook does not run there; install with "
                               "--scope managed (root) to keep it on");
        }
        if (auto *perm = so.if_contains("permissions"); perm && perm->is_object()) {
          if (auto *ask = perm->as_object().if_contains("ask"); ask && ask->is_array()) {
            for (auto &r : ask->as_array()) {
              if (r.is_string() && std::string_view(r.as_string()).rfind("Bash", 0) == 0) {
                a.warnings.push_back(p +
                                     " has an ask rule for Bash; a hook's allow does not override "
                                     "it, so headless runs refuse those commands");
                break;
              }
            }
          }
        }
      } catch (const std::exception &) {
      }
    }
  }

  bool shell_tool(std::string_view tool) const override {
    return tool == "Bash" || tool == "Monitor";
  }

  ask_route route(std::string &why) const override {
    std::string version = claude_version_from_env();
    if (!version.empty() && version_at_least(version, claude_ask_minimum))
      return ask_route::ask;
    why = version.empty()
              ? std::string(
                    "this Claude Code does not name its version to hooks (AI_AGENT, from 2.1.120), "
                    "and before 2.1.85 it does not show a hook's question with the rewrite, so "
                    "sluice cannot ask; update Claude Code")
              : "Claude Code " + version + " (before " + claude_ask_minimum +
                    ") does not show a hook's "
                    "question with the rewrite, so sluice cannot ask; update Claude Code";
    return ask_route::no_prompt;
  }
};

} // namespace

const host_adapter &claude_host() {
  static const claude_adapter h;
  return h;
}

} // namespace sluice::adapters
