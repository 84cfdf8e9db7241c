#include "adapters/agent.hpp"
#include "adapters/host_adapter.hpp"
#include "exec/environment.hpp"
#include "exec/mount_view.hpp"
#include "exec/profile_resolver.hpp"

#include <boost/json.hpp>
#include <boost/url/parse.hpp>
#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

namespace sluice::adapters {
namespace {

using exec::refusal;

std::string env(const char *name) { return env_or(name, ""); }

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

// The host's binary on PATH, or a refusal that says how to install it.
std::string host_binary(const std::string &name, const std::string &package) {
  std::string b = find_on_path(name);
  if (b.empty()) {
    throw refusal(name + " is not on PATH; install it (npm install -g " + package + ") or put its directory on PATH");
  }
  return b;
}

// A host's state directory: made when missing (0700), resolved, and inside the home.
std::string state_dir(std::string dir, const std::string &home, const std::string &what) {
  if (dir.empty() || dir[0] != '/') throw refusal(what + "=" + dir + " is not an absolute path; fix it");
  if (dir == home || !exec::is_under(dir, home)) {
    throw refusal("the host's state directory " + dir + " (" + what + ") is not inside the home " + home +
                  "; sluice agent shows only the home's own state inside");
  }
  // Made when missing, with the parents the home lacks (~/.pi for ~/.pi/agent), 0700.
  for (std::size_t at = home.size() + 1; at != std::string::npos && at <= dir.size();) {
    std::size_t next = dir.find('/', at);
    std::string part = dir.substr(0, next);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      throw refusal("cannot make the host's state directory " + part + ": " + std::strerror(errno));
    }
    at = next == std::string::npos ? next : next + 1;
  }
  char real[PATH_MAX];
  if (!::realpath(dir.c_str(), real)) throw refusal("cannot resolve " + dir + ": " + std::strerror(errno));
  dir = real;
  if (dir == home || !exec::is_under(dir, home)) {
    throw refusal("the host's state directory " + dir + " (" + what + ") is not inside the home " + home +
                  "; sluice agent shows only the home's own state inside");
  }
  return dir;
}

// Directories of settings a host reads (hooks, rules, skills): made when missing so that they can
// be shown read-only.
void protect_dirs(exec::host_boundary &b, const std::string &dir, std::initializer_list<const char *> names) {
  for (auto name : names) {
    std::string d = dir + "/" + name;
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
      throw refusal("cannot make " + d + ": " + std::strerror(errno));
    }
    b.protect.push_back(d);
  }
}

void keep_host_env(exec::host_boundary &b, std::initializer_list<const char *> prefixes) {
  for (char **e = environ; *e; ++e) {
    std::string_view kv(*e);
    std::string name(kv.substr(0, kv.find('=')));
    for (auto prefix : prefixes) {
      if (name.rfind(prefix, 0) == 0 && !exec::is_credential_name(name)) b.keep_env.push_back(name);
    }
  }
}

// The model endpoint's POST paths as a route, the endpoint on the allowlist, and the key the
// gateway adds to its requests (the variable inside holds the placeholder).
void model_endpoint(exec::host_boundary &b, const endpoint &e, std::vector<std::string> paths,
                    filters::credential_config key) {
  b.allow.push_back(e.pattern);
  filters::route_rule api;
  api.host = e.pattern;
  api.methods = {"POST"};
  for (auto &p : paths) api.paths.push_back(e.base + p);
  api.text = filters::describe_route(api);
  b.routes.push_back(api);
  key.hosts = {e.pattern};
  b.credentials.push_back(std::move(key));
}

// Claude Code: `claude` on PATH; state in ~/.claude (or $CLAUDE_CONFIG_DIR) and ~/.claude.json;
// the Anthropic Messages API at ANTHROPIC_BASE_URL (default https://api.anthropic.com), its key
// from ANTHROPIC_API_KEY (x-api-key) or ANTHROPIC_AUTH_TOKEN (Bearer).
exec::host_boundary claude_boundary(const agent_request &r, const std::string &home, std::string &binary) {
  binary = host_binary("claude", "@anthropic-ai/claude-code");
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
  filters::credential_config key;
  key.name = "claude-model";
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
  model_endpoint(b, e, {"/v1/messages", "/v1/messages/*"}, key);
  b.set_env.push_back("ANTHROPIC_BASE_URL=" + e.url);
  b.set_env.push_back("DISABLE_AUTOUPDATER=1"); // its install is read-only inside
  // Claude's own word for "this process is in a sandbox": it then takes --dangerously-skip-permissions
  // from a root caller too (the boundary is sluice's, whatever Claude's permission mode).
  b.set_env.push_back("IS_SANDBOX=1");

  std::string dir = state_dir(env("CLAUDE_CONFIG_DIR").empty() ? home + "/.claude" : env("CLAUDE_CONFIG_DIR"),
                              home, env("CLAUDE_CONFIG_DIR").empty() ? "~/.claude" : "CLAUDE_CONFIG_DIR");
  b.state.push_back(dir);
  // Settings, hooks and what runs with them (plugins, skills, agents, commands) are read-only.
  // Their directories are made when missing, so that they can be (Claude makes some at start);
  // a settings file made inside is moved aside when the host ends.
  protect_dirs(b, dir, {"hooks", "skills", "agents", "commands", "plugins", "output-styles"});
  for (auto name : {"settings.json", "settings.local.json", "CLAUDE.md", "keybindings.json", "managed-settings.json"}) {
    b.protect.push_back(dir + "/" + name);
  }
  b.hide.push_back(dir + "/.credentials.json");
  // ~/.claude.json (onboarding, trusted folders, MCP servers) is a copy inside, without keys that
  // may hold secrets: what the host writes to it stays inside.
  // The placeholder is the key Claude sees: it is marked approved (Claude keeps the last 20
  // characters of keys a person accepted), so that an interactive Claude does not ask about it at
  // every start.
  std::string state_file = env("CLAUDE_CONFIG_DIR").empty() ? home + "/.claude.json" : dir + "/.claude.json";
  if (exec::is_under(state_file, home) && !exec::is_under(state_file, dir)) {
    boost::json::object o;
    std::string text = read_small(state_file, 8u << 20);
    boost::system::error_code ec;
    auto v = text.empty() ? boost::json::value() : boost::json::parse(text, ec);
    if (!ec && v.is_object()) o = std::move(v.as_object());
    for (auto it = o.begin(); it != o.end();) {
      it = secret_key(it->key()) ? o.erase(it) : std::next(it);
    }
    if (key.env == "ANTHROPIC_API_KEY") {
      std::string placeholder = filters::credential_placeholder(key.name);
      o["customApiKeyResponses"] = boost::json::object{
          {"approved", boost::json::array{boost::json::string(placeholder.substr(placeholder.size() - 20))}},
          {"rejected", boost::json::array{}}};
    }
    if (!ec) b.home_files.emplace_back(state_file, boost::json::serialize(o));
  }
  keep_host_env(b, {"CLAUDE_", "ANTHROPIC_", "DISABLE_"});
  return b;
}

// Codex: `codex` on PATH; state in $CODEX_HOME (default ~/.codex); the model provider of its
// config.toml (model_provider, [model_providers.NAME] base_url and env_key; built in: openai at
// https://api.openai.com/v1 with OPENAI_API_KEY), the key sent as a Bearer token.
exec::host_boundary codex_boundary(const agent_request &r, const std::string &home, std::string &binary) {
  binary = host_binary("codex", "@openai/codex");
  exec::host_boundary b;
  b.host = "codex";
  std::string dir = state_dir(env("CODEX_HOME").empty() ? home + "/.codex" : env("CODEX_HOME"), home,
                              env("CODEX_HOME").empty() ? "~/.codex" : "CODEX_HOME");
  std::string url = "https://api.openai.com/v1", key_env = "OPENAI_API_KEY", from = "Codex's default";
  std::string config = dir + "/config.toml";
  if (::access(config.c_str(), F_OK) == 0) {
    toml::table t;
    try {
      t = toml::parse_file(config);
    } catch (const toml::parse_error &e) {
      throw refusal(config + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()) +
                    "; Codex could not read it either: fix it");
    }
    std::string provider = t["model_provider"].value_or(std::string("openai"));
    if (auto *p = t["model_providers"][provider].as_table()) {
      if (auto u = (*p)["base_url"].value<std::string>()) {
        url = *u;
        from = "[model_providers." + provider + "] base_url in " + config;
      }
      key_env = (*p)["env_key"].value_or(std::string());
    } else if (provider != "openai") {
      throw refusal(config + " names model_provider \"" + provider + "\" but has no [model_providers." + provider +
                    "]; fix it, or give the endpoint with --model-url");
    }
  }
  if (!r.model_url.empty()) {
    url = r.model_url;
    from = "--model-url";
  }
  if (key_env.empty() || env(key_env.c_str()).empty()) {
    throw refusal("sluice agent codex needs the model's key in " + (key_env.empty() ? std::string("the env_key variable") : key_env) +
                  ": the gateway adds it to the requests for " + url + " and Codex inside holds a placeholder; "
                  "a ChatGPT login stored in auth.json is not taken inside. Export the key and run again");
  }
  endpoint e = parse_endpoint(url, from);
  filters::credential_config key;
  key.name = "codex-model";
  key.source = "env:" + key_env;
  key.header = "Authorization";
  key.format = "Bearer {}";
  key.env = key_env;
  model_endpoint(b, e, {"/responses", "/responses/*", "/chat/completions"}, key);
  // A provider with supports_websockets (the built-in one has it) opens the Responses WebSocket
  // at BASE/responses first: allowed as a WebSocket route, the key added on the upgrade. Where it
  // is refused anyway (a deny rule), the 426 sends Codex to plain HTTP at once.
  filters::route_rule ws;
  ws.host = e.pattern;
  ws.methods = {"GET"};
  ws.paths = {e.base + "/responses"};
  ws.websocket = true;
  ws.text = filters::describe_route(ws);
  b.routes.push_back(ws);
  b.state.push_back(dir);
  // Its settings, hooks and rules are read-only (its bundled skills are copied into skills/.system
  // at start, which stays writable for it).
  protect_dirs(b, dir, {"rules", "prompts"});
  for (auto name : {"config.toml", "hooks.json", "AGENTS.md", "AGENTS.override.md", "managed_config.toml"}) {
    b.protect.push_back(dir + "/" + name);
  }
  b.hide.push_back(dir + "/auth.json");
  keep_host_env(b, {"CODEX_", "RUST_LOG"});
  // Its own sandbox cannot nest in sluice's (no user namespaces inside): sluice's boundary holds
  // its shell instead.
  b.host_args = {"-c", "sandbox_mode=\"danger-full-access\""};
  return b;
}

// The value of `--NAME VALUE` or `--NAME=VALUE` in the host's arguments, or "".
std::string host_option(const std::vector<std::string> &args, const std::string &name) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (args[i] == name && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind(name + "=", 0) == 0) return args[i].substr(name.size() + 1);
  }
  return {};
}

// A host's JSON file ({} when missing or empty); `comments` for the JSON with comments and
// trailing commas that OpenCode reads (opencode.jsonc).
boost::json::object json_file(const std::string &path, bool comments = false) {
  std::string text = read_small(path, 8u << 20);
  if (text.empty()) return {};
  boost::json::parse_options po;
  po.allow_comments = comments;
  po.allow_trailing_commas = comments;
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec, {}, po);
  if (ec || !v.is_object()) {
    throw refusal(path + " is not a JSON object (" + (ec ? ec.message() : std::string("another type")) +
                  "); the host could not read it either: fix it");
  }
  return std::move(v.as_object());
}

// Pi: `pi` on PATH; state in $PI_CODING_AGENT_DIR (default ~/.pi/agent); the provider of `--provider`
// or settings.json's defaultProvider, as models.json defines it (baseUrl, api, apiKey naming an
// environment variable) or one of the built-in anthropic and openai.
exec::host_boundary pi_boundary(const agent_request &r, const std::string &home, std::string &binary) {
  binary = host_binary("pi", "@mariozechner/pi-coding-agent");
  exec::host_boundary b;
  b.host = "pi";
  bool own = !env("PI_CODING_AGENT_DIR").empty();
  std::string dir = state_dir(own ? env("PI_CODING_AGENT_DIR") : home + "/.pi/agent", home,
                              own ? "PI_CODING_AGENT_DIR" : "~/.pi/agent");
  auto settings = json_file(dir + "/settings.json");
  std::string provider = host_option(r.args, "--provider");
  if (provider.empty()) {
    if (auto *p = settings.if_contains("defaultProvider"); p && p->is_string()) provider = p->as_string();
  }
  if (provider.empty()) {
    throw refusal("sluice agent pi needs to know the model provider: give pi --provider NAME after --, or set "
                  "defaultProvider in " + dir + "/settings.json");
  }
  std::string url, api, key_env, from;
  auto models = json_file(dir + "/models.json");
  const boost::json::object *def = nullptr;
  if (auto *ps = models.if_contains("providers"); ps && ps->is_object()) {
    if (auto *p = ps->as_object().if_contains(provider); p && p->is_object()) def = &p->as_object();
  }
  if (def) {
    auto str = [&](const char *k) {
      auto *v = def->if_contains(k);
      return v && v->is_string() ? std::string(v->as_string()) : std::string();
    };
    url = str("baseUrl");
    api = str("api");
    key_env = str("apiKey");
    from = "providers." + provider + " in " + dir + "/models.json";
    bool env_name = !key_env.empty() && key_env.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == std::string::npos;
    if (!key_env.empty() && (!env_name || env(key_env.c_str()).empty())) {
      throw refusal(from + ": apiKey must name an environment variable that holds the key (\"apiKey\": "
                    "\"MY_KEY\" with MY_KEY exported): a key written there or a command would be read "
                    "inside, where the gateway adds the key instead");
    }
  } else if (provider == "anthropic") {
    url = "https://api.anthropic.com", api = "anthropic-messages", key_env = "ANTHROPIC_API_KEY";
    from = "Pi's anthropic provider";
  } else if (provider == "openai") {
    url = "https://api.openai.com/v1", api = "openai-responses", key_env = "OPENAI_API_KEY";
    from = "Pi's openai provider";
  } else {
    throw refusal("provider '" + provider + "' is not in " + dir + "/models.json and is not one sluice knows "
                  "(anthropic, openai); define it there with baseUrl, api and apiKey");
  }
  if (!r.model_url.empty()) {
    url = r.model_url;
    from = "--model-url";
  }
  if (url.empty()) throw refusal(from + " has no baseUrl; add it, or give --model-url");
  if (key_env.empty() || env(key_env.c_str()).empty()) {
    throw refusal("sluice agent pi needs the model's key in " + (key_env.empty() ? std::string("a variable") : key_env) +
                  " (" + from + "): the gateway adds it to the requests for " + url + "; export it and run again");
  }
  endpoint e = parse_endpoint(url, from);
  filters::credential_config key;
  key.name = "pi-model";
  key.source = "env:" + key_env;
  key.env = key_env;
  std::vector<std::string> paths;
  if (api == "anthropic-messages") {
    key.header = "x-api-key";
    key.format = "{}";
    paths = {"/v1/messages", "/v1/messages/*", "/messages", "/messages/*"};
  } else {
    key.header = "Authorization";
    key.format = "Bearer {}";
    paths = {"/chat/completions", "/responses", "/responses/*"};
  }
  model_endpoint(b, e, paths, key);
  b.state.push_back(dir);
  protect_dirs(b, dir, {"extensions", "skills", "prompts", "themes"});
  for (auto name : {"settings.json", "models.json", "AGENTS.md", "SYSTEM.md", "keybindings.json"}) {
    b.protect.push_back(dir + "/" + name);
  }
  b.hide.push_back(dir + "/auth.json");
  keep_host_env(b, {"PI_"});
  return b;
}

// A directory of the XDG base-directory spec: $VAR when set, else the home's default.
std::string xdg_dir(const char *var, const std::string &home, const char *fallback, const char *app) {
  std::string base = env(var).empty() ? home + "/" + fallback : env(var);
  return base + "/" + app;
}

// OpenCode: `opencode` on PATH; its configuration in $XDG_CONFIG_HOME/opencode (~/.config/opencode),
// its settings and what grants or runs something (plugins, agents, commands, tools) read-only; its
// data (sessions; auth.json and mcp-auth.json hold stored keys: hidden), cache and state in the
// XDG data, cache and state directories, read-write. The model is `--model PROVIDER/MODEL` (-m) or
// "model" of the user's own opencode.json (or $OPENCODE_CONFIG): a repository's opencode.json is
// not trusted to name the endpoint the key goes to. Its provider's options.baseURL is the endpoint
// (the built-in anthropic and openai have defaults), and its key is named by options.apiKey
// "{env:NAME}", or is the built-in provider's variable.
exec::host_boundary opencode_boundary(const agent_request &r, const std::string &home, std::string &binary) {
  binary = host_binary("opencode", "opencode-ai");
  exec::host_boundary b;
  b.host = "opencode";
  std::string config_dir = state_dir(xdg_dir("XDG_CONFIG_HOME", home, ".config", "opencode"), home,
                                     "$XDG_CONFIG_HOME/opencode");
  std::string config_file = env("OPENCODE_CONFIG");
  boost::json::object config;
  if (!config_file.empty()) {
    config = json_file(config_file, true);
  } else {
    for (auto name : {"opencode.json", "opencode.jsonc", "config.json"}) {
      std::string f = config_dir + "/" + name;
      if (::access(f.c_str(), F_OK) == 0) {
        config_file = f;
        config = json_file(f, true);
        break;
      }
    }
  }
  std::string model = host_option(r.args, "--model");
  if (model.empty()) model = host_option(r.args, "-m");
  if (model.empty()) {
    if (auto *m = config.if_contains("model"); m && m->is_string()) model = m->as_string();
  }
  auto slash = model.find('/');
  if (slash == std::string::npos || slash == 0) {
    throw refusal("sluice agent opencode needs to know the model: give opencode --model PROVIDER/MODEL after --, "
                  "or set \"model\" in " + (config_file.empty() ? config_dir + "/opencode.json" : config_file) +
                  " (a repository's opencode.json does not name the endpoint the key goes to)");
  }
  std::string provider = model.substr(0, slash);
  const boost::json::object *def = nullptr;
  if (auto *ps = config.if_contains("provider"); ps && ps->is_object()) {
    if (auto *p = ps->as_object().if_contains(provider); p && p->is_object()) def = &p->as_object();
  }
  auto str = [](const boost::json::object *o, const char *k) {
    auto *v = o ? o->if_contains(k) : nullptr;
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  const boost::json::object *options = nullptr;
  if (def) {
    if (auto *o = def->if_contains("options"); o && o->is_object()) options = &o->as_object();
  }
  std::string npm = str(def, "npm"), url = str(options, "baseURL"), api_key = str(options, "apiKey");
  std::string from = "provider." + provider + ".options.baseURL in " + config_file, key_env;
  if (npm.empty()) npm = provider == "anthropic" ? "@ai-sdk/anthropic" : provider == "openai" ? "@ai-sdk/openai" : "";
  if (url.empty() && provider == "anthropic") url = "https://api.anthropic.com/v1", from = "OpenCode's anthropic provider";
  if (url.empty() && provider == "openai") url = "https://api.openai.com/v1", from = "OpenCode's openai provider";
  if (!api_key.empty()) {
    bool env_ref = api_key.size() > 6 && api_key.rfind("{env:", 0) == 0 && api_key.back() == '}';
    key_env = env_ref ? api_key.substr(5, api_key.size() - 6) : std::string();
    if (key_env.empty() || key_env.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
                               std::string::npos) {
      throw refusal("provider." + provider + ".options.apiKey in " + config_file + " must name an environment "
                    "variable that holds the key (\"apiKey\": \"{env:MY_KEY}\" with MY_KEY exported): a key "
                    "written there would be read inside, where the gateway adds the key instead");
    }
  } else if (provider == "anthropic") {
    key_env = "ANTHROPIC_API_KEY";
  } else if (provider == "openai") {
    key_env = "OPENAI_API_KEY";
  }
  if (!r.model_url.empty()) {
    url = r.model_url;
    from = "--model-url";
  }
  if (url.empty()) {
    throw refusal("provider '" + provider + "' has no options.baseURL in " +
                  (config_file.empty() ? config_dir + "/opencode.json" : config_file) + " and is not one sluice "
                  "knows (anthropic, openai); add it there, or give --model-url");
  }
  if (key_env.empty() || env(key_env.c_str()).empty()) {
    throw refusal("sluice agent opencode needs the model's key in " +
                  (key_env.empty() ? std::string("a variable (\"apiKey\": \"{env:NAME}\" in the provider's options)") : key_env) +
                  ": the gateway adds it to the requests for " + url + " and OpenCode inside holds a placeholder; "
                  "a key stored by `opencode auth login` is not taken inside. Export it and run again");
  }
  endpoint e = parse_endpoint(url, from);
  filters::credential_config key;
  key.name = "opencode-model";
  key.source = "env:" + key_env;
  key.env = key_env;
  if (npm == "@ai-sdk/anthropic") {
    key.header = "x-api-key";
    key.format = "{}";
  } else {
    key.header = "Authorization";
    key.format = "Bearer {}";
  }
  model_endpoint(b, e, {"/chat/completions", "/responses", "/responses/*", "/messages", "/messages/*"}, key);
  // The configuration directory: OpenCode writes its .gitignore (and the plugins' installed
  // packages) there at start; the settings, instructions and whatever holds code it runs
  // (plugins, tools, packages and how they are installed) are read-only.
  b.state.push_back(config_dir);
  protect_dirs(b, config_dir, {"plugin", "plugins", "tool", "tools", "agent", "agents", "command", "commands",
                               "mode", "modes", "skill", "skills", "node_modules"});
  // package.json and bun.lock stay writable: OpenCode rewrites them at every start for a configured
  // plugin (1.3.2 stops when it cannot), and what they name is installed only into node_modules,
  // which stays read-only, as does opencode.json, the only place that makes a package a plugin.
  for (auto name : {"opencode.json", "opencode.jsonc", "config.json", "tui.json", "tui.jsonc", "AGENTS.md",
                    "bunfig.toml", ".npmrc"}) {
    b.protect.push_back(config_dir + "/" + name);
  }
  std::string data = state_dir(xdg_dir("XDG_DATA_HOME", home, ".local/share", "opencode"), home, "$XDG_DATA_HOME/opencode");
  b.state.push_back(data);
  b.hide.push_back(data + "/auth.json");
  b.hide.push_back(data + "/mcp-auth.json");
  b.state.push_back(state_dir(xdg_dir("XDG_CACHE_HOME", home, ".cache", "opencode"), home, "$XDG_CACHE_HOME/opencode"));
  b.state.push_back(state_dir(xdg_dir("XDG_STATE_HOME", home, ".local/state", "opencode"), home, "$XDG_STATE_HOME/opencode"));
  keep_host_env(b, {"OPENCODE_", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"});
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
  } else if (r.host == "codex") {
    ex.agent = codex_boundary(r, home, binary);
  } else if (r.host == "pi") {
    ex.agent = pi_boundary(r, home, binary);
  } else if (r.host == "opencode") {
    ex.agent = opencode_boundary(r, home, binary);
  } else {
    throw refusal("unknown agent host '" + r.host + "'; use claude, codex, opencode or pi");
  }
  // The default profile of the whole agent is network-read: the model endpoint is a route of its own.
  if (!ex.request.profile) ex.request.profile = filters::profile::network_read;
  ex.argv = {binary};
  ex.argv.insert(ex.argv.end(), ex.agent.host_args.begin(), ex.agent.host_args.end());
  ex.argv.insert(ex.argv.end(), r.args.begin(), r.args.end());
  return ex;
}

int run_agent(const agent_request &r) { return exec::run_exec(agent_exec_options(r)); }

} // namespace sluice::adapters
