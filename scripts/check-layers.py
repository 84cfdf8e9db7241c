#!/usr/bin/python3
"""The include directions of the source tree (docs/architecture.md, "The gateway's house"), checked
on every build: a quoted #include that a folder may not make fails the build, naming the file, the
line and the rule. Each folder lists what it may include (the most specific folder's rule applies);
a folder's own files are always allowed.

usage: scripts/check-layers.py SOURCE_DIR"""
import os
import re
import sys

# The gateway's base: networking pieces every part of the gateway (and credentials/) stands on.
BASE = ["gateway/net.hpp", "gateway/error.hpp", "gateway/tls_stream.hpp", "gateway/resolver.hpp",
        "gateway/local_addresses.hpp", "gateway/https_post.hpp", "gateway/peer_uid.hpp",
        "gateway/parking_lot.hpp", "gateway/end_to_end_fields.hpp", "gateway/client_meters.hpp",
        "gateway/request_summary.hpp"]
PURE = ["filters/"]
LOW = PURE + ["certs/", "metrics/"]
# What a protocol wing may use: the exchange, the way out, the base, and its host, the session
# (its public part; gateway_state is the state the session shares with the worker).
WING = LOW + BASE + ["gateway/exchange/", "gateway/upstream/", "gateway/session_impl.hpp",
                     "gateway/gateway_state.hpp", "credentials/", "scan/inflate.hpp"]
ANYTHING_BUT = object()  # marker: a rule that forbids rather than allows

RULES = {
    "filters": PURE,
    # The secret scanner stands alone (Hyperscan, RE2, OpenSSL, Boost): filters/ holds its
    # policy's data, gateway/exchange/ brings the two together.
    "scan": [],
    "certs": ["certs/"],
    "metrics": ["metrics/"],
    "credentials": PURE + BASE + ["gateway/upstream/dial.hpp"],
    "gateway/exchange": PURE + ["scan/"],
    "gateway/upstream": LOW + BASE,
    "gateway/admin": LOW + BASE + ["gateway/exchange/"],
    # The external decider's client: the exchange's question, its transports (a program, or an
    # HTTPS endpoint reached as any origin is).
    "gateway/decider": LOW + BASE + ["gateway/exchange/"],
    # Budgets' counters shared in Redis: the exchange's ledger asks, a link of its own talks.
    "gateway/shared_limits": LOW + BASE + ["gateway/exchange/"],
    "gateway/http1": WING,
    # Tunnels hand a terminated connection's requests to the HTTP/1.1 loop or to an h2 connection.
    "gateway/tunnel": WING + ["gateway/h2/connection.hpp", "gateway/session.hpp", "gateway/capture.hpp"],
    "gateway/h2": WING,
    "gateway/websocket": WING,
    "gateway/ssh": WING,
    # The gateway's top and the session: everything of the gateway, never exec, adapters or cli.
    "gateway": (ANYTHING_BUT, ["exec/", "adapters/", "cli/"]),
    "exec": (ANYTHING_BUT, ["adapters/", "cli/", "gateway/h2/", "gateway/websocket/",
                            "gateway/session_impl.hpp"]),
    "adapters": (ANYTHING_BUT, ["cli/"]),
    "cli": (ANYTHING_BUT, []),
}


def rule_for(folder):
    while folder:
        if folder in RULES:
            return folder, RULES[folder]
        folder = os.path.dirname(folder)
    return None, None


def allowed(include, folder, rule):
    if "/" not in include or include.startswith(folder + "/"):
        return True
    if isinstance(rule, tuple):
        return not any(include.startswith(p) for p in rule[1])
    return any(include.startswith(p) for p in rule)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    bad = []
    for top in ("filters", "scan", "certs", "metrics", "credentials", "gateway", "exec", "adapters", "cli"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.join(dirpath, name)
                folder = os.path.relpath(dirpath, root)
                owner, rule = rule_for(folder)
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                        if m and not allowed(m.group(1), folder, rule):
                            bad.append(f"{os.path.relpath(path, root)}:{n}: includes \"{m.group(1)}\", "
                                       f"against the direction of {owner}/ (scripts/check-layers.py lists "
                                       "what it may include; move the shared piece down instead)")
    for b in bad:
        print(b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
