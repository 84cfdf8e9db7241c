"""An OAuth2 authorization server and the API it guards, over HTTPS on loopback, for the credential
tests. usage: oauth_origin.py PORT CERT KEY

POST /oauth/token   RFC 6749: client authentication by HTTP Basic (OAUTH_CLIENT "id:secret");
                    grant_type=refresh_token with the refresh token in force (OAUTH_REFRESH at
                    first; each grant rotates it) or grant_type=client_credentials. Answers
                    {"access_token", "token_type", "expires_in": OAUTH_TTL, "refresh_token"}.
GET /api            200 "api ok <token's number>" with a Bearer token that is issued and not
                    expired; 401 otherwise.
POST /oauth/garbage 200 with an HTML page instead of JSON.
GET /api/revoke     every token issued so far is revoked (as a provider does on a key rotation).
A grant with the scope "long" gets tokens that live an hour instead of OAUTH_TTL.
Each grant is appended to OAUTH_LOG as one JSON line (grant type, scope)."""
import base64
import http.server
import json
import os
import ssl
import sys
import threading
import time
import urllib.parse

LOCK = threading.Lock()
STATE = {"refresh": os.environ.get("OAUTH_REFRESH", ""), "tokens": {}, "n": 0}
TTL = float(os.environ.get("OAUTH_TTL", "2"))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, body, content_type="text/plain"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        if self.path == "/oauth/garbage":  # a token endpoint that answers what is not JSON
            return self.send(200, "<html>welcome</html>", "text/html")
        if self.path != "/oauth/token":
            return self.send(404, "no\n")
        form = dict(urllib.parse.parse_qsl(body))
        auth = self.headers.get("Authorization", "")
        want = "Basic " + base64.b64encode(os.environ["OAUTH_CLIENT"].encode()).decode()
        if auth != want:
            return self.send(401, json.dumps({"error": "invalid_client"}), "application/json")
        with LOCK:
            grant = form.get("grant_type")
            if grant == "refresh_token" and form.get("refresh_token") != STATE["refresh"]:
                return self.send(400, json.dumps({"error": "invalid_grant"}), "application/json")
            if grant not in ("refresh_token", "client_credentials"):
                return self.send(400, json.dumps({"error": "unsupported_grant_type"}), "application/json")
            STATE["n"] += 1
            token = "at-%d-%s" % (STATE["n"], os.urandom(6).hex())
            ttl = 3600 if "long" in form.get("scope", "").split() else TTL
            STATE["tokens"][token] = (STATE["n"], time.time() + ttl)
            answer = {"access_token": token, "token_type": "Bearer", "expires_in": int(ttl)}
            if grant == "refresh_token":
                STATE["refresh"] = "rt-%d-%s" % (STATE["n"], os.urandom(6).hex())
                answer["refresh_token"] = STATE["refresh"]
        with open(os.environ["OAUTH_LOG"], "a") as f:
            f.write(json.dumps({"grant": grant, "scope": form.get("scope", "")}) + "\n")
        self.send(200, json.dumps(answer), "application/json")

    def do_GET(self):
        if self.path == "/api/revoke":  # the provider revokes every token issued so far
            with LOCK:
                STATE["tokens"].clear()
            return self.send(200, "revoked\n")
        if self.path != "/api":
            return self.send(404, "no\n")
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else ""
        with LOCK:
            entry = STATE["tokens"].get(token)
        if not entry or entry[1] < time.time():
            return self.send(401, "token missing or expired\n")
        self.send(200, "api ok %d\n" % entry[0])


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
