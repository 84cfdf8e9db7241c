"""The access log's tamper-evident chain (docs/metrics.md, "The chain"): `sluice serve` with an
operator's Ed25519 key ([log] signing_key), rotated (mv, then SIGHUP) between requests, and
`sluice exec --access-log` with the key made for its run (the summary's accessLog). `sluice audit
verify` passes on the untouched logs and names the exact record of each tampering: a line deleted,
inserted, edited by one byte, two lines swapped, the end cut, a checkpoint from another run.
Everything listens on loopback; the exec cases also run as 65534."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import test_exec as base
from harness import SLUICE, Gateway, LoopbackOrigins, curl, loopback_upstream, log_records, start_dns

setUpModule = base.setUpModule
tearDownModule = base.tearDownModule


def make_key(directory, name):
    """An Ed25519 key pair as an operator makes one: (private PEM path, public PEM path)."""
    key, pub = os.path.join(directory, name + ".pem"), os.path.join(directory, name + ".pub.pem")
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", pub], check=True, capture_output=True)
    return key, pub


def verify(*args):
    p = subprocess.run([SLUICE, "audit", "verify", *args], capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode() + p.stderr.decode()


def lines_of(path):
    with open(path) as f:
        return f.read().splitlines(keepends=True)


def write_lines(path, lines):
    with open(path, "w") as f:
        f.writelines(lines)


def seq_of(line):
    o = json.loads(line)
    return o.get("seq", o.get("unmapped", {}).get("seq"))


class SignedGateway(Gateway):
    """A gateway whose [log] also has the chain's keys (`log_extra`)."""
    log_extra = ""

    def write_config(self, body, listen_extra=""):
        super().write_config(body, listen_extra)
        with open(self.config, "a") as f:
            f.write(self.log_extra)


def serve_run(cls, name, key, requests_before, requests_after=0, rotate=False):
    """One serve run with `key`: requests, an optional rotation (mv log log.1; SIGHUP), more
    requests, then SIGTERM. Returns the log's files, oldest first."""
    dns = start_dns(cls.procs, {})
    body = f"""profile = "network-read"
[policy]
allow = ["origin.test:{cls.https}", "origin.test:{cls.http}"]
""" + loopback_upstream(cls.ca[0], dns, {"origin.test": "127.0.0.1"})
    SignedGateway.log_extra = f'signing_key = "file:{key}"\nwriter = "gw-audit"\ncheckpoint_interval = "1s"\n'
    gw = SignedGateway(cls.procs, cls.tmp.name, body, name)

    def send(n):
        for i in range(n):
            url = f"https://origin.test:{cls.https}/bytes/{100 + i}" if i % 2 else f"http://origin.test:{cls.http}/n/{i}"
            curl(gw, url)
        want = n
        assert gw.logged(lambda _: len(gw.access_log()) >= want, timeout=10)

    send(requests_before)
    time.sleep(1.2)  # an interval checkpoint comes with the next record (or the next second)
    files = [gw.log]
    if rotate:
        os.rename(gw.log, gw.log + ".1")
        gw.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while not os.path.exists(gw.log) and time.monotonic() < deadline:
            time.sleep(0.05)
        files = [gw.log + ".1", gw.log]
        send(requests_after)
        time.sleep(1.2)
    gw.proc.send_signal(signal.SIGTERM)
    gw.proc.wait(timeout=30)
    return files


class ServeAudit(LoopbackOrigins):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.key, cls.pub = make_key(cls.tmp.name, "operator")
        cls.files = serve_run(cls, "serve", cls.key, 6, 6, rotate=True)
        # Another run with the same key and writer name, and one with another key: their checkpoints
        # are what a forger has at hand.
        cls.same_key_files = serve_run(cls, "again", cls.key, 2)
        other_key, _ = make_key(cls.tmp.name, "other")
        cls.other_key_files = serve_run(cls, "other", other_key, 2)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-audit-")
        self.old, self.new = (shutil.copy(f, self.dir) for f in self.files)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def tampered(self, change):
        """Verifies the rotated pair after `change(lines)` changed the newer file's lines."""
        lines = lines_of(self.new)
        change(lines)
        write_lines(self.new, lines)
        return verify(self.old, self.new, "--key", self.pub)

    def at(self, n):
        return "%s:%d:" % (self.new, n)

    def test_untouched_rotated_logs_verify(self):
        code, out = verify(self.old, self.new, "--key", self.pub)
        self.assertEqual(code, 0, out)
        old, new = lines_of(self.old), lines_of(self.new)
        self.assertIn("verified: %d records of 1 writer" % len(log_records(old + new)), out)
        # The old file ends with the checkpoint the rotation wrote; the new one goes on from it.
        self.assertEqual(json.loads(old[-1])["type"], "checkpoint")
        self.assertEqual(seq_of(new[0]), seq_of(old[-1]) + 1)
        self.assertTrue(json.loads(new[-1])["final"])
        # An interval checkpoint in each file (it stands in for the rotation's), and the closing one.
        self.assertGreaterEqual(sum('"type":"checkpoint"' in l for l in old + new), 3, old + new)
        self.assertGreaterEqual(len(log_records(new)), 6)
        # The private key also serves as --key (its public half is in it).
        self.assertEqual(verify(self.old, self.new, "--key", self.key)[0], 0)

    def records_from(self, n):
        """The first index past the file's first line from which `n` lines in a row are records, not
        checkpoints: on a loaded machine an interval checkpoint (every second here) may fall anywhere
        among the first lines, and the tampering tests change records."""
        lines = lines_of(self.new)
        for i in range(1, len(lines) - n):
            if all('"type":"checkpoint"' not in l for l in lines[i - 1:i + n + 1]):
                return i
        self.fail("no %d records in a row in %s" % (n, lines))

    def test_a_deleted_record_is_named(self):
        i = self.records_from(1)
        code, out = self.tampered(lambda l: l.pop(i))
        self.assertEqual(code, 1, out)
        s = seq_of(lines_of(self.new)[i])
        self.assertIn("%s writer gw-audit: seq %d follows seq %d" % (self.at(i + 1), s, s - 2), out)
        self.assertIn("record %d removed" % (s - 1), out)

    def test_an_inserted_record_is_named(self):
        lines = lines_of(self.new)
        copied = self.records_from(1)
        at = next(i for i in range(copied + 2, len(lines) - 1)
                  if '"type":"checkpoint"' not in lines[i] + lines[i - 1])  # among records, as records_from

        def insert(ls):
            ls.insert(at, ls[copied])
        code, out = self.tampered(insert)
        self.assertEqual(code, 1, out)
        self.assertIn("%s writer gw-audit: seq %d inserted" % (self.at(at + 1), seq_of(lines[copied])), out)

    def test_one_edited_byte_is_named(self):
        n = self.records_from(1)

        def edit(lines):
            i = lines[n].index('"status":') + len('"status":')
            lines[n] = lines[n][:i] + ("5" if lines[n][i] != "5" else "4") + lines[n][i + 1:]
        code, out = self.tampered(edit)
        self.assertEqual(code, 1, out)
        self.assertIn("%s writer gw-audit: seq %d edited" % (self.at(n + 1), seq_of(lines_of(self.new)[n])), out)

    def test_swapped_records_are_named(self):
        n = self.records_from(2)

        def swap(lines):
            lines[n], lines[n + 1] = lines[n + 1], lines[n]
        code, out = self.tampered(swap)
        self.assertEqual(code, 1, out)
        lines = lines_of(self.new)
        self.assertIn("%s writer gw-audit: seq %d comes before seq %d (%s" %
                      (self.at(n + 1), seq_of(lines[n]), seq_of(lines[n + 1]), self.at(n + 2)[:-1]), out)
        self.assertIn("records reordered", out)

    def test_a_cut_end_is_named(self):
        code, out = self.tampered(lambda l: l.__delitem__(slice(-3, None)))
        self.assertEqual(code, 1, out)
        lines = lines_of(self.new)
        self.assertIn("%s writer gw-audit: the chain ends at seq %d without its closing checkpoint" %
                      (self.at(len(lines)), seq_of(lines[-1])), out)
        # A writer still running says the same without failing.
        code, out = verify(self.old, self.new, "--key", self.pub, "--running")
        self.assertEqual(code, 0, out)

    def test_a_checkpoint_from_another_run_is_named(self):
        for files, why in ((self.same_key_files, "does not link to seq"), (self.other_key_files, "was signed by another key")):
            with self.subTest(why):
                write_lines(self.new, lines_of(self.files[1]))
                foreign = lines_of(files[0])[-1]
                code, out = self.tampered(lambda l: l.__setitem__(len(l) - 1, foreign))
                self.assertEqual(code, 1, out)
                self.assertIn("%s writer gw-audit: checkpoint seq %d %s" %
                              (self.at(len(lines_of(self.new))), seq_of(foreign), why), out)

    def test_bad_input_is_a_usage_error(self):
        code, out = verify(os.path.join(self.dir, "missing.log"), "--key", self.pub)
        self.assertEqual(code, 125, out)
        self.assertIn("missing.log", out)
        code, out = verify(self.new, "--key", os.path.join(self.dir, "no-such-key"))
        self.assertEqual(code, 125, out)
        self.assertIn("--key", out)


class ExecAuditAsRoot(base.ExecCase):
    def run_logged(self, *extra):
        log, summary = os.path.join(self.work, "access.log"), os.path.join(self.work, "summary.json")
        p = self.sx("--sandbox-profile", "network-read", "--access-log", log, "--json-summary", summary, *extra, "--",
                    "sh", "-c", "curl -sS -o /dev/null https://origin.test:8443/hello; "
                    "curl -s -o /dev/null -X POST https://origin.test:8443/post; "
                    "curl -sS -o /dev/null https://origin.test:8443/bytes/10; exit 0")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(summary) as f:
            return log, json.load(f)["accessLog"]

    def test_a_run_verifies_with_the_key_in_its_summary(self):
        log, meta = self.run_logged()
        self.assertEqual(meta["file"], log)
        code, out = verify(log, "--key", meta["publicKey"])
        self.assertEqual(code, 0, out)
        self.assertIn("verified: %d records of 1 writer, signed by key %s" % (len(log_records(lines_of(log))), meta["keyId"]),
                      out)
        lines = lines_of(log)
        self.assertEqual(json.loads(lines[0])["writer"], meta["writer"])
        self.assertTrue(json.loads(lines[-1])["final"])
        # One byte edited in the second record.
        lines[1] = lines[1].replace('"POST"', '"PUT"', 1) if '"POST"' in lines[1] else lines[1].replace('"GET"', '"GOT"', 1)
        write_lines(log, lines)
        code, out = verify(log, "--key", meta["publicKey"])
        self.assertEqual(code, 1, out)
        self.assertIn("%s:2: writer %s: seq 2 edited" % (log, meta["writer"]), out)

    def test_ocsf_events_carry_the_chain_and_verify(self):
        log, meta = self.run_logged("--access-log-format", "ocsf")
        events = log_records(lines_of(log))
        self.assertGreaterEqual(len(events), 3)
        self.assertEqual([e["metadata"]["sequence"] for e in events], list(range(1, len(events) + 1)))
        self.assertEqual([e["unmapped"]["seq"] for e in events], list(range(1, len(events) + 1)))
        key = os.path.join(self.work, "run.pub")
        with open(key, "w") as f:
            f.write(meta["publicKey"] + "\n")
        code, out = verify(log, "--key", key)
        self.assertEqual(code, 0, out)
        # Another run's key does not verify this run's checkpoints.
        _, other = self.run_logged()
        code, out = verify(log, "--key", other["publicKey"])
        self.assertEqual(code, 1, out)
        self.assertIn("signed by another key", out)


class ExecAuditAsNobody(ExecAuditAsRoot):
    user = 65534
