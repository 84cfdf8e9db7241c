"""The command line: every subcommand that `sluice --help` lists (aliases too) runs when it is
named first. main.cpp builds only the named subcommand's group of options (the rest cost every
exec and hook call about 0.4 ms); a subcommand its table sends to the wrong group would fail
here, with CLI11's "not expected" error instead of its help."""
import re
import subprocess
import unittest

from harness import SLUICE


def run(*args):
    return subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=30)


class CommandLine(unittest.TestCase):
    def subcommands(self):
        out = run("--help")
        self.assertEqual(out.returncode, 0, out.stderr)
        listed = out.stdout.split("Subcommands:", 1)[1]
        names = {}  # each name (an alias too) -> the name the subcommand's usage shows
        for line in listed.splitlines():
            m = re.match(r"^  (\S.*?)\s{2,}", line)
            if m:
                both = [n.strip() for n in m.group(1).split(",")]
                names.update((n, both[0]) for n in both)
        return names

    def test_every_listed_subcommand_runs_when_named_first(self):
        names = self.subcommands()
        self.assertIn("exec", names)
        self.assertIn("pending", names)  # an alias: it must reach its group too
        self.assertGreaterEqual(len(names), 19)
        for name, primary in names.items():
            with self.subTest(subcommand=name):
                out = run(name, "--help")
                self.assertEqual(out.returncode, 0, "%s --help: %s" % (name, out.stderr))
                self.assertIn("Usage: sluice %s" % primary, out.stdout)

    def test_a_missing_or_unknown_subcommand_is_refused_with_the_way_to_help(self):
        for args in ((), ("frobnicate",), ("--no-such-option",)):
            with self.subTest(args=args):
                out = run(*args)
                self.assertEqual(out.returncode, 125, out.stdout + out.stderr)
                self.assertIn("--help", out.stderr)

    def test_version_needs_no_subcommand(self):
        out = run("--version")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("sluice "), out.stdout)


if __name__ == "__main__":
    unittest.main()
