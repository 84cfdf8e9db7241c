#include "gateway/serve.hpp"
#include "gateway/decider/client.hpp"

#include <openssl/rand.h>
#include "certs/ca_files.hpp"
#include "filters/policy_loader.hpp"
#include "filters/request_hygiene.hpp"
#include "gateway/exchange/judge.hpp"
#include "gateway/gateway.hpp"
#include "credentials/load.hpp"

#include <boost/asio/detached.hpp>
#include <boost/url/parse.hpp>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <iostream>
#include <sys/prctl.h>
#include <sys/stat.h>

namespace sluice::gateway {

namespace {

std::string read_text(const std::string &path, bool &ok) {
  std::ifstream f(path, std::ios::binary);
  ok = static_cast<bool>(f);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The config in `text` with its credentials' secrets loaded: a policy ready to swap in.
filters::policy_ptr load_policy(const std::string &text, const std::string &path) {
  auto cfg = filters::load_config_string(text, path);
  for (auto &c : cfg.credentials) {
    credentials::load_credential(c, cfg);
    filters::make_placeholders(c, false); // the same in every replica
  }
  return std::make_shared<const filters::policy>(std::move(cfg));
}

std::string clients_note(const filters::config &cfg) {
  if (cfg.clients.empty()) return {};
  return ", " + std::to_string(cfg.clients.size()) + " client" + (cfg.clients.size() == 1 ? "" : "s") +
         " in " + std::to_string(cfg.roles.size()) + " role" + (cfg.roles.size() == 1 ? "" : "s");
}

// Shaped placeholders are derived from the credential's name: the operator gives them to clients.
void say_placeholders(const filters::config &cfg) {
  for (const auto &c : cfg.credentials) {
    if (c.aws) {
      std::fprintf(stderr, "sluice: credential %s: clients sign with AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s\n",
                   c.name.c_str(), c.placeholder.c_str(), c.aws->placeholder_secret.c_str());
    } else if (!c.placeholder_shape.empty()) {
      std::fprintf(stderr, "sluice: credential %s: clients send the placeholder %s\n", c.name.c_str(),
                   c.placeholder.c_str());
    }
  }
}

// [approvals]: decided on the admin listener with a token: the token_file's, else one made now
// (`made`: said on stderr at start, since no one else knows it). Empty without [approvals].
std::string approvals_token(const filters::config &cfg, bool &made) {
  std::string token;
  if (!cfg.asks()) return token;
  if (cfg.admin_listen.empty()) {
    throw std::runtime_error("[approvals] needs an admin listener, where a person decides: set [listen] admin = \"127.0.0.1:9090\"");
  }
  if (!cfg.approvals.token_file.empty()) {
    bool ok = false;
    token = read_text(cfg.approvals.token_file, ok);
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (!ok || token.size() < 16 || token.find_first_of(" \t\r\n") != std::string::npos) {
      throw std::runtime_error("[approvals] token_file " + cfg.approvals.token_file +
                               " must hold a token of at least 16 characters without spaces (openssl rand -hex 16 > FILE)");
    }
  } else {
    unsigned char raw[16];
    if (RAND_bytes(raw, sizeof raw) != 1) throw std::runtime_error("no random bytes for the approvals token");
    static constexpr char hex[] = "0123456789abcdef";
    for (unsigned char b : raw) {
      token += hex[b >> 4];
      token += hex[b & 15];
    }
    made = true;
  }
  return token;
}

// Signals are taken synchronously by this thread; workers inherit the blocked mask.
sigset_t block_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return set;
}

// The listeners, bound at start (a reload does not add or move them), as the start-up line names
// them.
struct bound_listeners {
  tcp::endpoint proxy;
  std::string agents;
  std::string admin;
};

bound_listeners open_listeners(gateway &g, const filters::config &cfg) {
  bound_listeners out;
  out.proxy = g.listen(cfg.proxy_listen, true);
  if (!cfg.proxy_tls_listen.empty()) {
    auto tep = g.listen_tls(cfg.proxy_tls_listen);
    out.agents += ", HTTPS proxy on " + tep.address().to_string() + ":" + std::to_string(tep.port()) +
                  (cfg.client_ca.empty() ? "" : " (client certificates from " + cfg.client_ca + ")");
  }
  for (const auto &a : cfg.agents) {
    auto aep = g.listen_agent(a);
    out.agents += ", agent " + a.name + " on " + aep.address().to_string() + ":" + std::to_string(aep.port());
  }
  if (!cfg.admin_listen.empty()) {
    auto aep = g.listen_admin(cfg.admin_listen);
    out.admin = aep.address().to_string() + ":" + std::to_string(aep.port());
  }
  return out;
}

// --ca-bundle-out and --ca-out: the CA's certificate for clients, written before serving.
void write_ca_files(const serve_options &options, const gateway &g) {
  if (!options.ca_bundle_out.empty()) {
    // Written next to the target and renamed: a client never reads half a bundle.
    std::string roots = certs::system_trust_bundle();
    std::string tmp = options.ca_bundle_out + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << roots << g.ca().cert_pem();
      if (!f) throw std::runtime_error("cannot write --ca-bundle-out file '" + tmp + "'");
    }
    ::chmod(tmp.c_str(), 0644);
    if (std::rename(tmp.c_str(), options.ca_bundle_out.c_str()) != 0) {
      throw std::runtime_error("cannot write --ca-bundle-out file '" + options.ca_bundle_out + "'");
    }
  }
  if (!options.ca_out.empty()) {
    std::ofstream f(options.ca_out, std::ios::trunc);
    f << g.ca().cert_pem();
    if (!f) throw std::runtime_error("cannot write --ca-out file '" + options.ca_out + "'");
  }
}

// Reloads on SIGHUP, and by itself when the file's text changes (checked every second: an edit,
// a rename over it, or a Kubernetes ConfigMap update, which swaps a symlink). A file that does
// not load keeps the previous policy, and is reported once until it changes again. Returns the
// signal that asks to stop (SIGTERM or SIGINT).
int reload_until_stopped(gateway &g, const serve_options &options, std::string loaded_text, const sigset_t &set) {
  auto reload = [&](const std::string &text, const char *why) {
    loaded_text = text;
    try {
      auto next = load_policy(text, options.config_file);
      auto note = clients_note(next->cfg());
      g.reload(std::move(next));
      std::fprintf(stderr, "sluice: reloaded policy from %s (%s)%s\n", options.config_file.c_str(), why,
                   note.c_str());
    } catch (const std::exception &e) {
      std::fprintf(stderr, "sluice: reload failed, keeping the previous policy: %s\n", e.what());
    }
  };
  bool unreadable_said = false;
  const timespec tick{1, 0};
  for (;;) {
    int sig = sigtimedwait(&set, nullptr, &tick);
    g.log_tick(); // the access log's interval checkpoint, written even when no request comes
    if (sig < 0) {
      bool ok = false;
      std::string text = read_text(options.config_file, ok);
      if (!ok) {
        if (!unreadable_said) {
          std::fprintf(stderr, "sluice: cannot read %s; keeping the previous policy until it is back\n",
                       options.config_file.c_str());
        }
        unreadable_said = true;
        continue;
      }
      unreadable_said = false;
      if (text != loaded_text) reload(text, "file changed");
      continue;
    }
    if (sig == SIGHUP) {
      // Rotation: `mv access.log access.log.1; kill -HUP` and the log goes on in a new file, its
      // chain unbroken (the old file ends with a checkpoint).
      if (auto failed = g.reopen_log(); !failed.empty()) std::fprintf(stderr, "sluice: %s\n", failed.c_str());
      bool ok = false;
      std::string text = read_text(options.config_file, ok);
      if (!ok) {
        std::fprintf(stderr, "sluice: reload failed, keeping the previous policy: cannot read %s\n",
                     options.config_file.c_str());
        continue;
      }
      reload(text, "SIGHUP");
      continue;
    }
    return sig;
  }
}

// The stop: not ready for [timeouts] drain_delay, then the drain.
void drain_on(gateway &g, int sig) {
  auto delay = g.policy()->cfg().timeouts.drain_delay;
  if (delay.count() > 0) {
    // Not ready first, still serving: the load balancer stops sending new connections here
    // while responses close the ones it has; a second signal cuts the wait short.
    g.set_unready();
    std::fprintf(stderr, "sluice: not ready (signal %d); draining in %lld ms\n", sig,
                 static_cast<long long>(delay.count()));
    timespec wait{static_cast<time_t>(delay.count() / 1000), static_cast<long>(delay.count() % 1000) * 1'000'000};
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigtimedwait(&stop, nullptr, &wait);
  }
  std::fprintf(stderr, "sluice: draining (signal %d)\n", sig);
  g.drain();
  g.join();
}

} // namespace

int run_serve(const serve_options &options) {
  // The process holds secrets (credentials, a CA key): no core dumps, no ptrace by others.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  bool readable = false;
  std::string loaded_text = read_text(options.config_file, readable);
  if (!readable) filters::load_config_file(options.config_file); // throws the message that names the fix
  auto policy = load_policy(loaded_text, options.config_file);
  const auto &cfg = policy->cfg();
  say_placeholders(cfg);
  gateway_options go;
  go.threads = options.threads;
  go.command_id = "serve";
  bool token_made = false;
  go.approvals_token = approvals_token(cfg, token_made);
  if (!cfg.ca_cert.empty()) {
    go.ca = std::make_shared<certs::certificate_authority>(
        certs::certificate_authority::load(cfg.ca_cert, cfg.ca_key));
  }
  sigset_t set = block_signals();

  gateway g(policy, go);
  auto [ep, agents, admin] = open_listeners(g, cfg);
  write_ca_files(options, g);
  g.start();
  if (!go.approvals_token.empty()) {
    std::fprintf(stderr, "sluice: approvals: decide on http://%s/#token=%s or with sluice approvals --admin %s%s\n",
                 admin.c_str(), token_made ? go.approvals_token.c_str() : "(the token_file's)", admin.c_str(),
                 token_made ? "" : (" --token-file " + cfg.approvals.token_file).c_str());
  }
  std::fprintf(stderr, "sluice: serving %s profile on %s:%u%s%s%s%s (config %s)\n",
               std::string(filters::to_string(cfg.mode)).c_str(), ep.address().to_string().c_str(),
               ep.port(), clients_note(cfg).c_str(), agents.c_str(), admin.empty() ? "" : ", admin on ",
               admin.c_str(), options.config_file.c_str());
  drain_on(g, reload_until_stopped(g, options, loaded_text, set));
  return 0;
}

namespace {
// `sluice check [--skill NAME] git-receive-pack ssh://host[:port]/org/repo.git`: Git over SSH
// judged by the skill's ssh entries (docs/policy.md), as the SSH gateway judges the command.
int check_ssh(filters::config cfg, const std::string &config_file, bool profile_given, const std::string &skill,
              const std::string &method, const std::string &url) {
  const std::string name = skill.empty() ? "default" : skill;
  auto it = cfg.skills.find(name);
  if (it == cfg.skills.end()) {
    throw std::runtime_error("ssh:// URLs are judged by a skill's ssh entries, and " +
                             (config_file.empty() ? std::string("the built-in policy") : config_file) +
                             " has no [skills." + name + "]; name one with --skill");
  }
  cfg.ssh = it->second.ssh;
  if (!profile_given) cfg.mode = it->second.default_profile;
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u || !u->has_authority() || u->encoded_host().empty()) {
    throw std::runtime_error("URL '" + url + "' is not an ssh://[USER@]HOST[:PORT]/PATH URL");
  }
  std::string host(u->encoded_host());
  unsigned port = u->has_port() ? u->port_number() : 22;
  std::string path = u->path();
  filters::git_ssh_command cmd;
  std::string quoted = method + " '";
  for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  filters::policy pol(cfg);
  auto why = filters::parse_git_ssh_command(quoted, cmd);
  if (!why.empty()) {
    std::printf("DENY reason=%s\n", std::string(why).c_str());
    return 1;
  }
  auto d = pol.decide_ssh(host, port, cmd.service, cmd.repository);
  if (d.allowed) {
    std::printf("ALLOW rule=%s\n", d.rule.c_str());
    return 0;
  }
  std::printf("DENY reason=%s%s%s\n", std::string(d.reason).c_str(), d.rule.empty() ? "" : " rule=", d.rule.c_str());
  return 1;
}
} // namespace

namespace {
// `sluice check [--skill NAME] tcp://HOST:PORT`: TCP to a named service or a host service, judged
// as the gateway judges a captured or CONNECT connection: the skill's tcp and host_services (the
// file's [policy] tcp when it has no skills), its default profile unless one is given, and the
// addresses a pin names.
int check_tcp(filters::config cfg, bool profile_given, const std::string &skill, const std::string &url) {
  if (auto it = cfg.skills.find(skill.empty() ? "default" : skill); it != cfg.skills.end()) {
    cfg.tcp = it->second.tcp;
    cfg.host_services = it->second.host_services;
    if (!profile_given) cfg.mode = it->second.default_profile;
  } else if (!skill.empty()) {
    throw std::runtime_error("--skill '" + skill + "': no [skills." + skill + "] in the policy");
  }
  std::string_view authority = std::string_view(url).substr(6);
  std::string_view raw_host;
  unsigned port = 0;
  auto parsed = filters::split_authority(authority, raw_host, port) && port != 0 ? filters::parse_host(raw_host)
                                                                                  : filters::host_parse_result{};
  if (!parsed.host || authority.find('/') != std::string_view::npos) {
    throw std::runtime_error("URL '" + url + "' is not tcp://HOST:PORT (a name and a port, nothing after)");
  }
  filters::policy pol(cfg);
  auto d = pol.decide_tcp(parsed.host->name, port);
  if (d.allowed && parsed.host->name != filters::host_service_name) {
    std::vector<boost::asio::ip::address> addrs;
    if (parsed.host->ip) addrs.push_back(*parsed.host->ip);
    if (auto pin = cfg.pins.find(parsed.host->name); pin != cfg.pins.end()) addrs = pin->second;
    for (auto &a : addrs) {
      if (!pol.decide_address(a).allowed) d = filters::decision::deny("destination_address_denied", d.rule);
    }
  }
  if (d.allowed) {
    std::printf("%s rule=%s\n", d.would_deny ? "WOULD_DENY" : "ALLOW", d.rule.c_str());
    return 0;
  }
  std::printf("DENY reason=%s%s%s\n", std::string(d.reason).c_str(), d.rule.empty() ? "" : " rule=", d.rule.c_str());
  return 1;
}

// The body a sample request carries (check --body FILE; empty without it).
std::string body_of(const check_request &c) {
  if (c.body_file.empty()) return {};
  std::ifstream f(c.body_file, std::ios::binary);
  if (!f) throw std::runtime_error("--body '" + c.body_file + "': cannot read it; give a file's path");
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The body, scanned as the gateway scans a body ([scan]): with its Content-Encoding (--header).
// Returns the refusal's reason, or empty.
std::string_view scan_body(const check_request &c, exchange::verdict &v) {
  if (!v.scan || c.body_file.empty()) return {};
  return v.scan->body(body_of(c), true);
}
} // namespace

// [[limits.budget]]: the budgets a request to o's host falls under, one line each, with what they
// count (a gateway's counters are its own: check says which limits apply, not what is left).
static void print_budgets(const filters::policy &pol, const exchange::outcome &o, const std::string &client) {
  std::vector<std::size_t> which;
  pol.budgets_for(o.host, o.scheme, o.port, which);
  for (auto i : which) {
    const auto &b = pol.cfg().limits.budgets[i];
    std::string line = "limit: " + b.name + " per=" + std::string(filters::scope_name(b.per));
    if (b.per != filters::budget_rule::scope::run && !client.empty()) line += " client=" + client;
    char num[64];
    if (b.requests_per_second > 0) {
      std::snprintf(num, sizeof num, " requests_per_second=%g burst=%g", b.requests_per_second,
                    b.burst > 0 ? b.burst : std::max(1.0, b.requests_per_second));
      line += num;
    }
    if (b.connections) line += " connections=" + std::to_string(b.connections);
    if (b.bytes_out) line += " bytes_out=" + std::to_string(b.bytes_out);
    if (b.bytes_in) line += " bytes_in=" + std::to_string(b.bytes_in);
    std::printf("%s\n", line.c_str());
  }
}

// One question to the policy's [decider], as the gateway would ask it (the program started for it
// and stopped after).
decider::answer ask_decider(const filters::config &cfg, boost::json::object question) {
  decider::client d(cfg.decider, cfg, nullptr);
  net::io_context ioc;
  decider::answer got;
  net::co_spawn(ioc, [&]() -> net::awaitable<void> { got = co_await d.decide(std::move(question)); },
                net::detached);
  ioc.run();
  d.stop();
  return got;
}

// [decider] in `sluice check`: asked as the gateway asks it, its answer printed and folded into
// the verdict (an allowed miss judged again as the gateway judges it).
static void fold_decider(const filters::config &cfg, const exchange::request &r, exchange::judging &j,
                         exchange::verdict &v, exchange::outcome &o, const decider::asker &who,
                         const check_request &c) {
  auto a = ask_decider(cfg, decider::question(r, v, o, who));
  auto say = [&a] {
    std::printf("decider: %s%s%s%s\n", std::string(decider::to_string(a.kind)).c_str(),
                a.message.empty() ? "" : " (", a.message.c_str(), a.message.empty() ? "" : ")");
  };
  say();
  if (a.kind == decider::answer::body) { // as the gateway does: asked again with the body
    std::printf("  (asked again with the body%s)\n", c.body_file.empty() ? ", empty: give one with --body FILE" : "");
    auto q = decider::question(r, v, o, who);
    decider::add_body(q, body_of(c));
    a = ask_decider(cfg, std::move(q));
    if (a.kind == decider::answer::body) a.kind = decider::answer::unavailable; // as the gateway takes them
    if (a.kind == decider::answer::ask) a.kind = decider::answer::deny;
    say();
  }
  if (a.kind == decider::answer::allow && !v.reason.empty()) {
    j.approved_next = true;
    exchange::outcome again;
    v = exchange::judge(r, j, again);
    o = std::move(again);
  } else if (a.kind == decider::answer::ask) {
    std::printf("  (a person would be asked: [approvals])\n");
    if (v.reason.empty()) v.reason = "host_not_allowlisted";
  } else if (auto no = decider::refusal_of(a.kind); !no.empty()) {
    v.reason = no;
    v.rule = "decider";
  }
}

int run_check(const check_request &c) {
  const auto &config_file = c.config_file, &profile = c.profile, &method = c.method, &url = c.url,
             &client = c.client, &skill = c.skill;
  const auto &allow = c.allow, &deny = c.deny;
  filters::config cfg = config_file.empty() ? filters::config{} : filters::load_config_file(config_file);
  if (!profile.empty()) {
    auto p = filters::parse_profile(profile);
    if (!p) {
      throw std::runtime_error("--sandbox-profile '" + profile +
                               "': use offline, network-read, publish or allowlist");
    }
    cfg.mode = *p;
  }
  if (url.rfind("ssh://", 0) == 0) return check_ssh(cfg, config_file, !profile.empty(), skill, method, url);
  if (url.rfind("tcp://", 0) == 0) return check_tcp(cfg, !profile.empty(), skill, url);
  cfg.allow.insert(cfg.allow.end(), allow.begin(), allow.end());
  cfg.deny.insert(cfg.deny.end(), deny.begin(), deny.end());
  auto top = std::make_shared<const filters::policy>(cfg);
  filters::policy_ptr judged = top;
  if (!client.empty()) {
    judged = top->for_client(client);
    if (!judged) {
      std::string known;
      for (const auto &[name, c] : cfg.clients) known += (known.empty() ? "" : ", ") + name;
      throw std::runtime_error("--client '" + client + "': no [clients." + client + "] in " +
                               (config_file.empty() ? std::string("the built-in policy") : config_file) +
                               (known.empty() ? "; it names no clients" : "; its clients: " + known));
    }
  }
  const auto &pol = *judged;
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u || !u->has_authority() || (u->scheme() != "http" && u->scheme() != "https")) {
    throw std::runtime_error("URL '" + url + "' is not an absolute http:// or https:// URL");
  }
  // The request as a client sends it to the proxy, judged by the gateway's own judge: absolute-form
  // with its Host, and a POST to git-upload-pack with the content type Git gives it, so that a
  // fetch is judged as the read it is.
  exchange::field_list fields{{"host", u->encoded_host_and_port()}};
  std::vector<std::pair<std::string, std::string>> extra;
  for (const auto &h : c.headers) {
    auto colon = h.find(':');
    if (colon == std::string::npos || colon == 0) {
      throw std::runtime_error("--header '" + h + "': write it as \"Name: value\"");
    }
    auto value = h.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    extra.emplace_back(h.substr(0, colon), value);
  }
  for (const auto &[n, v] : extra) fields.emplace_back(n, v);
  std::string_view path = u->encoded_path();
  if (method == "POST" && path.ends_with("/git-upload-pack")) {
    fields.emplace_back("content-type", "application/x-git-upload-pack-request");
  }
  exchange::request r;
  r.method = method;
  r.target = url;
  r.fields = &fields;
  exchange::outcome o;
  const auto db = exchange::compile_scan(pol, {});
  exchange::judging j{pol};
  j.scan = &db;
  auto v = exchange::judge(r, j, o);
  if (v.decide && (v.reason.empty() || v.reason == "host_not_allowlisted")) {
    fold_decider(cfg, r, j, v, o, {c.client, pol.cfg().role, skill, {}, filters::to_string(pol.mode())}, c);
  }
  if (v.reason.empty()) v.reason = scan_body(c, v);
  if (v.reason.empty()) {
    // The addresses the gateway would dial, judged as it judges them: the literal, or the pins.
    std::vector<boost::asio::ip::address> addrs;
    if (v.ip) addrs.push_back(*v.ip);
    if (auto pin = cfg.pins.find(o.host); pin != cfg.pins.end()) addrs = pin->second;
    for (auto &a : addrs) {
      if (!pol.decide_address(a).allowed) v.reason = "destination_address_denied";
    }
  }
  print_budgets(pol, o, c.client);
  if (!v.reason.empty()) {
    std::string rule = v.rule.empty() ? o.rule : v.rule;
    if (!o.scan_rule.empty()) rule = "scan:" + o.scan_rule;
    std::printf("DENY reason=%s%s%s%s%s\n", std::string(v.reason).c_str(), rule.empty() ? "" : " rule=",
                rule.c_str(), o.scan_location.empty() ? "" : " location=", o.scan_location.c_str());
    return 1;
  }
  if (!o.would_deny.empty()) {
    // A role in report mode: let through, and logged as what enforce would do.
    std::printf("WOULD_DENY reason=%s%s%s (report mode: allowed)\n", std::string(o.would_deny).c_str(),
                o.rule.empty() ? "" : " rule=", o.rule.c_str());
    return 0;
  }
  std::printf("ALLOW rule=%s\n", o.rule.c_str());
  if (!o.scan_rule.empty()) {
    std::printf("  (reported by [scan]: %s at %s)\n", o.scan_rule.c_str(), o.scan_location.c_str());
  }
  if (v.git_read) std::printf("  (a Git fetch: its body must hold Git negotiation only, as network-read reads)\n");
  return 0;
}

} // namespace sluice::gateway
