#!/usr/bin/env bash
# The built-in local demo: a local HTTPS origin (python3, certificate from a demo CA), `sluice serve`
# in the network-read profile with an ephemeral CA, then allowed and denied requests with curl and
# the metrics they produced; then one command under `sluice exec` (network-read: a GET allowed, a
# POST refused, the home and a credential file hidden, the exit status kept). Everything stays on 127.0.0.1 and is removed at the end. From a terminal,
# the demo then keeps serving so that the live page (http://127.0.0.1:9090/) can be opened; press
# Enter to stop. SLUICE_DEMO_KEEP=0 stops at once, SLUICE_DEMO_KEEP=1 waits even without a terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh default
SLUICE="$PWD/build/default/sluice"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ORIGIN=$(port); PROXY=$(port)
# The admin listener (live page, /metrics) on 9090 when that port is free.
if /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 9090))' 2>/dev/null; then
  ADMIN=9090
else
  ADMIN=$(port)
fi

# A demo CA and a certificate for docs.demo.test, the origin's name.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=demo origin CA" \
  -keyout "$work/origin-ca.key" -out "$work/origin-ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=docs.demo.test" \
  -keyout "$work/origin.key" -out "$work/origin.csr" 2>/dev/null
printf 'subjectAltName=DNS:docs.demo.test\n' > "$work/ext"
openssl x509 -req -in "$work/origin.csr" -CA "$work/origin-ca.pem" -CAkey "$work/origin-ca.key" \
  -CAcreateserial -days 1 -extfile "$work/ext" -out "$work/origin.pem" 2>/dev/null
/usr/bin/python3 tests/integration/origin.py "$ORIGIN" "$work/origin.pem" "$work/origin.key" >/dev/null &
pids+=($!)
for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$ORIGIN") 2>/dev/null && break; sleep 0.05; done

cat > "$work/sluice.toml" <<TOML
profile = "network-read"
[listen]
proxy = "127.0.0.1:$PROXY"
admin = "127.0.0.1:$ADMIN"
[policy]
allow = ["docs.demo.test:$ORIGIN", "api.demo.test:$ORIGIN", "metadata.demo.test"]
[tls]
upstream_ca_bundle = "$work/origin-ca.pem"
[upstream]
allow_addresses = ["127.0.0.1/32"]   # the demo origin lives on loopback
[upstream.resolve]
"docs.demo.test" = "127.0.0.1"
"api.demo.test" = "127.0.0.1"
"metadata.demo.test" = "169.254.169.254"
[log]
access_log = "$work/access.log"
TOML
"$SLUICE" serve --config "$work/sluice.toml" --ca-out "$work/sluice-ca.pem" &
pids+=($!)
for _ in $(seq 100); do curl -s "http://127.0.0.1:$ADMIN/healthz" >/dev/null && break; sleep 0.05; done

show() { echo; echo "\$ $*"; "$@" || true; }
C=(curl -sS --proxy "http://127.0.0.1:$PROXY" --cacert "$work/sluice-ca.pem")
echo "== allowed: HTTPS GET, terminated by sluice and re-encrypted to the origin"
show "${C[@]}" "https://docs.demo.test:$ORIGIN/guide"
echo "== denied: POST in the read-only profile"
show "${C[@]}" -i -X POST -d 'x=1' "https://docs.demo.test:$ORIGIN/upload"
echo "== denied: a host that is not on the allowlist (refused before any TLS)"
show "${C[@]}" -i "https://exfil.example.net/"
echo "== denied: a name that points at the cloud metadata address"
show "${C[@]}" -i "http://metadata.demo.test/latest/meta-data/"
echo "== dry run with sluice check"
show "$SLUICE" check --config "$work/sluice.toml" DELETE "https://docs.demo.test:$ORIGIN/x"
echo
echo "== access log"
cat "$work/access.log"
echo
echo "== metrics (http://127.0.0.1:$ADMIN/metrics)"
curl -s "http://127.0.0.1:$ADMIN/metrics" | grep -E '^sluice_(requests_total|certs_minted_total|tls_handshakes_total|bytes_total)'
echo
echo "== live page: http://127.0.0.1:$ADMIN/ (its data: http://127.0.0.1:$ADMIN/api/stats)"
curl -s "http://127.0.0.1:$ADMIN/api/stats" | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
t = s["totals"]
print("   allowed %d, denied %d, failed %d" % (t["allowed"], t["denied"], t["errors"]))
for d in s["denials"]:
    print("   %-8s %-7s %-32s %s" % (d["decision"], d["method"], "%s:%d" % (d["host"], d["port"]), d["reason"]))'

echo
echo "== sluice exec: one command in its own sandbox, with its own gateway and CA"
mkdir -p "$work/project" "$work/home"
echo "API_TOKEN=demo-secret" > "$work/project/.env"
echo "ssh key of the demo user" > "$work/home/id_demo"
cat > "$work/exec-policy.toml" <<TOML
[skills.default]
default_profile = "network-read"
allow_domains = ["docs.demo.test:$ORIGIN"]
[tls]
upstream_ca_bundle = "$work/origin-ca.pem"
[upstream]
allow_addresses = ["127.0.0.1/32"]
[upstream.resolve]
"docs.demo.test" = "127.0.0.1"
TOML
script="curl -sS https://docs.demo.test:$ORIGIN/guide
echo \"POST: HTTP \$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x=1 https://docs.demo.test:$ORIGIN/upload)\"
echo \".env: [\$(cat .env)]\"; echo \"home: [\$(ls -A ~)]\"
exit 3"
echo "\$ cd project && sluice exec --policy exec-policy.toml -- sh -c '...'"
printf '%s\n' "$script" | sed 's/^/    /'
status=0
(cd "$work/project" && HOME="$work/home" "$SLUICE" exec --policy "$work/exec-policy.toml" -- sh -c "$script") || status=$?
echo "exit status: $status (the command's own)"

keep="${SLUICE_DEMO_KEEP:-}"
if [ -z "$keep" ]; then [ -t 0 ] && keep=1 || keep=0; fi
if [ "$keep" = 1 ]; then
  echo
  echo "sluice keeps serving: open http://127.0.0.1:$ADMIN/ in a browser, send more requests with"
  echo "  ${C[*]} https://docs.demo.test:$ORIGIN/guide"
  echo "and press Enter to stop."
  read -r _ || true
fi
