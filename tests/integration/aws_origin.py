"""An S3- and STS-style origin over HTTPS on loopback, for the AWS credential tests. Every request's
SigV4 signature is checked the way AWS checks it, by botocore's own signer (the copy Debian's
awscli carries) with the real key pair: AWS_ORIGIN_KEY_ID, AWS_ORIGIN_SECRET and, when set,
AWS_ORIGIN_TOKEN (then X-Amz-Security-Token must be present and signed).
usage: aws_origin.py PORT CERT KEY

S3 (path style): PUT /BUCKET/KEY stores, GET and HEAD /BUCKET/KEY read, GET /BUCKET?list-type=2
lists. STS: POST / with Action=GetCallerIdentity. A request whose signature does not verify gets
403 SignatureDoesNotMatch (or InvalidAccessKeyId). Each request is appended to AWS_ORIGIN_LOG as one
JSON line: method, path, the key it was signed with, its signed headers, whether it verified."""
import hashlib
import hmac
import http.server
import json
import os
import re
import ssl
import sys
import threading
import urllib.parse

sys.path.insert(0, "/usr/lib/python3/dist-packages/awscli")  # Debian's awscli keeps botocore here
from botocore.auth import S3SigV4Auth, SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

KEY_ID = os.environ["AWS_ORIGIN_KEY_ID"]
SECRET = os.environ["AWS_ORIGIN_SECRET"]
TOKEN = os.environ.get("AWS_ORIGIN_TOKEN", "")
LOG = os.environ.get("AWS_ORIGIN_LOG", "")
LOCK = threading.Lock()
OBJECTS = {}
AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                  r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, body=b"", content_type="application/xml", extra=(), head=False):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def error(self, code, name, message):
        self.send(code, "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code><Message>%s</Message>"
                        "</Error>" % (name, message))

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def verify(self, body):
        """None when the request is signed with the real pair as AWS would check it, else why not."""
        m = AUTH.match(self.headers.get("Authorization", ""))
        if not m:
            return "MissingAuthenticationToken", None, []
        key, _date, region, service, signed, signature = m.groups()
        names = signed.split(";")
        if key != KEY_ID:
            return "InvalidAccessKeyId", key, names
        if TOKEN and ("x-amz-security-token" not in names or self.headers.get("X-Amz-Security-Token") != TOKEN):
            return "InvalidToken", key, names
        headers = {n: ",".join(v.strip() for v in self.headers.get_all(n, [])) for n in names}
        req = AWSRequest(method=self.command, url="https://%s%s" % (self.headers["Host"], self.path),
                         headers=headers, data=body)
        req.context["timestamp"] = self.headers.get("X-Amz-Date", "")
        auth = (S3SigV4Auth if service == "s3" else SigV4Auth)(Credentials(KEY_ID, SECRET, TOKEN or None),
                                                                service, region)
        expected = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
        return (None if hmac.compare_digest(expected, signature) else "SignatureDoesNotMatch"), key, names

    def handle_any(self):
        body = self.body() if self.command in ("PUT", "POST") else b""
        why, key, names = self.verify(body)
        if LOG:
            with LOCK, open(LOG, "a") as f:
                f.write(json.dumps({"method": self.command, "path": self.path, "key": key, "signed": names,
                                    "verified": why is None, "why": why}) + "\n")
        if why:
            return self.error(403, why, "sluice test origin: " + why)
        url = urllib.parse.urlsplit(self.path)
        if self.command == "POST" and url.path == "/":
            form = dict(urllib.parse.parse_qsl(body.decode()))
            if form.get("Action") != "GetCallerIdentity":
                return self.error(400, "InvalidAction", form.get("Action", ""))
            return self.send(200, "<GetCallerIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
                                  "<GetCallerIdentityResult><Arn>arn:aws:iam::123456789012:user/sluice-test</Arn>"
                                  "<UserId>AIDASLUICETEST</UserId><Account>123456789012</Account>"
                                  "</GetCallerIdentityResult><ResponseMetadata><RequestId>1</RequestId>"
                                  "</ResponseMetadata></GetCallerIdentityResponse>", "text/xml")
        parts = url.path.lstrip("/").split("/", 1)
        bucket, key_name = parts[0], urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        if self.command == "PUT" and key_name:
            with LOCK:
                OBJECTS[(bucket, key_name)] = body
            return self.send(200, b"", extra=[("ETag", '"%s"' % hashlib.md5(body).hexdigest())])
        if self.command in ("GET", "HEAD") and key_name:
            with LOCK:
                data = OBJECTS.get((bucket, key_name))
            if data is None:
                return self.error(404, "NoSuchKey", key_name)
            return self.send(200, data, "application/octet-stream",
                             [("ETag", '"%s"' % hashlib.md5(data).hexdigest()),
                              ("Last-Modified", "Sat, 05 Dec 2026 00:00:00 GMT")], head=self.command == "HEAD")
        if self.command == "GET" and not key_name:
            with LOCK:
                keys = sorted(k for (b, k) in OBJECTS if b == bucket)
            contents = "".join("<Contents><Key>%s</Key><LastModified>2026-12-05T00:00:00.000Z</LastModified>"
                               "<ETag>\"x\"</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>"
                               % (k, len(OBJECTS[(bucket, k)])) for k in keys)
            return self.send(200, "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult "
                                  "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>%s</Name><Prefix></Prefix>"
                                  "<KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>%s"
                                  "</ListBucketResult>" % (bucket, len(keys), contents))
        return self.error(400, "InvalidRequest", self.command + " " + self.path)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = handle_any


def main():
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
