"""The tools agents run, inside `sluice exec --sandbox-profile network-read` with nothing but the
allowlist: pip from a PEP 503 index, python requests, npm (registry document and tarball), and Go's
net/http with and without proxy support. Every connection each makes shows in the summary. The
index, the registry and the files are on the test host (198.18.0.2, origin.py /files/); root and 65534.
(curl, wget, urllib, git, Node and the JVM have their rows in test_exec, test_git and test_capture.)"""
import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import unittest
import zipfile

import test_exec as base
from harness import PYTHON

M = base.M
BASE = "https://origin.test:8443/files"

GO_SRC = r'''package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func get(c *http.Client, url string) string {
	r, err := c.Get(url)
	if err != nil {
		return "error: " + err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func main() {
	fmt.Print(get(http.DefaultClient, os.Args[1]+"/go-proxy"))
	direct := &http.Client{Transport: &http.Transport{Proxy: nil}} // ignores HTTPS_PROXY
	fmt.Print(get(direct, os.Args[1]+"/go-direct"))
}
'''


def make_wheel(path):
    """A minimal pure-Python wheel: sluicedemo 1.0, with its RECORD hashes."""
    files = {"sluicedemo/__init__.py": b"VALUE = 'installed through sluice'\n",
             "sluicedemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sluicedemo\nVersion: 1.0\n",
             "sluicedemo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += "sluicedemo-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("sluicedemo-1.0.dist-info/RECORD", record)


def make_npm_package(root):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in {"package/package.json": b'{"name":"sluicedemo","version":"1.0.0","main":"index.js"}',
                           "package/index.js": b"module.exports = 'required through sluice';\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    tgz = buf.getvalue()
    with open(os.path.join(root, "sluicedemo-1.0.0.tgz"), "wb") as f:
        f.write(tgz)
    doc = {"name": "sluicedemo", "dist-tags": {"latest": "1.0.0"},
           "versions": {"1.0.0": {"name": "sluicedemo", "version": "1.0.0", "main": "index.js",
                                  "dist": {"tarball": f"{BASE}/npm/sluicedemo-1.0.0.tgz",
                                           "shasum": hashlib.sha1(tgz).hexdigest(),
                                           "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}}}}
    with open(os.path.join(root, "sluicedemo"), "w") as f:
        json.dump(doc, f)


def setUpModule():
    base.setUpModule()
    www = os.path.join(M["tmp"], "www")
    wheels = os.path.join(www, "wheels")
    os.makedirs(wheels)
    wheel = os.path.join(wheels, "sluicedemo-1.0-py3-none-any.whl")
    make_wheel(wheel)
    sha = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    os.makedirs(os.path.join(www, "simple", "sluicedemo"))
    with open(os.path.join(www, "simple", "index.html"), "w") as f:
        f.write('<!DOCTYPE html><html><body><a href="sluicedemo/">sluicedemo</a></body></html>\n')
    with open(os.path.join(www, "simple", "sluicedemo", "index.html"), "w") as f:
        f.write(f'<!DOCTYPE html><html><body><a href="../../wheels/sluicedemo-1.0-py3-none-any.whl#sha256={sha}">'
                'sluicedemo-1.0-py3-none-any.whl</a></body></html>\n')
    os.makedirs(os.path.join(www, "npm"))
    make_npm_package(os.path.join(www, "npm"))
    # Go: built once here (outside the sandbox), run inside; the client's behaviour is what is tested.
    if shutil.which("go"):
        src = os.path.join(M["tmp"], "gofetch")
        os.makedirs(src)
        with open(os.path.join(src, "main.go"), "w") as f:
            f.write(GO_SRC)
        env = dict(os.environ, GOCACHE=os.path.join(M["tmp"], "gocache"), GOPATH=os.path.join(M["tmp"], "gopath"),
                   GO111MODULE="off", CGO_ENABLED="0")
        subprocess.run(["go", "build", "-o", os.path.join(M["tmp"], "gofetch-bin"), "."], cwd=src, env=env,
                       check=True, capture_output=True, timeout=600)
    subprocess.run(["chmod", "-R", "a+rX", M["tmp"]], check=True)


tearDownModule = base.tearDownModule


class ClientsAsRoot(base.ExecCase):

    def run_tool(self, script):
        summary = os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", "network-read", "--json-summary", summary, "--", "sh", "-c",
                    "set -e; " + script, timeout=180)
        s = json.load(open(summary)) if os.path.exists(summary) else {}
        return p, s

    def assertAllAllowed(self, summary, minimum):
        reqs = summary.get("requests", [])
        self.assertTrue(reqs, summary)
        self.assertEqual({(r["host"], r["decision"]) for r in reqs}, {("origin.test", "allow")}, reqs)
        self.assertGreaterEqual(sum(r["count"] for r in reqs), minimum)

    def test_pip_installs_from_a_pep503_index(self):
        p, s = self.run_tool(f"{PYTHON} -m pip install -q --no-cache-dir --disable-pip-version-check "
                             f"--target /tmp/site --index-url {BASE}/simple/ sluicedemo; "
                             f"PYTHONPATH=/tmp/site {PYTHON} -c 'import sluicedemo; print(sluicedemo.VALUE)'")
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        self.assertEqual(p.stdout.decode().splitlines()[-1], "installed through sluice")
        self.assertAllAllowed(s, 2)  # the index page and the wheel

    def test_python_requests(self):
        try:
            subprocess.run([PYTHON, "-c", "import requests"], check=True, capture_output=True)
        except subprocess.CalledProcessError:
            self.skipTest("python3-requests is not installed")
        p, s = self.run_tool(f"{PYTHON} -c \"import requests; print(requests.get('https://origin.test:8443/requests').text, end='')\"")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout, b"hello from origin /requests\n")
        self.assertAllAllowed(s, 1)

    def test_npm_view_and_install(self):
        if not shutil.which("npm"):
            self.skipTest("no npm on this machine")
        npm = "npm --no-update-notifier --no-audit --no-fund --loglevel=error"
        p, s = self.run_tool(f"{npm} view sluicedemo version --registry {BASE}/npm/; "
                             f"{npm} install --prefix /tmp/n sluicedemo --registry {BASE}/npm/ >/dev/null; "
                             "node -p \"require('/tmp/n/node_modules/sluicedemo')\"")
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())
        self.assertEqual(p.stdout.decode().split(), ["1.0.0", "required", "through", "sluice"])
        self.assertAllAllowed(s, 2)  # the registry document and the tarball

    def test_go_net_http_with_and_without_proxy(self):
        binary = os.path.join(M["tmp"], "gofetch-bin")
        if not os.path.exists(binary):
            self.skipTest("no Go toolchain on this machine (Debian golang-go)")
        local = os.path.join(self.work, "gofetch")
        shutil.copy(binary, local)
        os.chmod(local, 0o755)
        p, s = self.run_tool(f"{local} https://origin.test:8443")
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(p.stdout, b"hello from origin /go-proxy\nhello from origin /go-direct\n")
        self.assertAllAllowed(s, 2)


class ClientsAsNobody(ClientsAsRoot):
    user = 65534


if __name__ == "__main__":
    unittest.main()
