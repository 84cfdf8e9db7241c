#!/usr/bin/python3
"""Prints where a run of scripts/test.sh spent its time: each phase's wall time (from the phase
file test.sh writes), the run's total, and the slowest suites of the ctest passes (from their JUnit
files), so that every CI run shows it. Usage: scripts/test-times.py PHASES_FILE JUNIT_FILE..."""
import re
import sys
import xml.etree.ElementTree as ET


def phases(path):
    """(name, seconds) per phase, from lines "NAME START END" (Unix seconds)."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                out.append((parts[0], int(parts[2]) - int(parts[1])))
    return out


def suites(path, label):
    """(seconds, "label name", status, python tests run, skipped) per test of one ctest JUnit file
    (a Python suite's counts from its closing "Ran N tests" and "skipped=N")."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        out = "".join(x.text or "" for x in case.iter("system-out"))
        ran = re.findall(r"^Ran (\d+) tests? in", out, re.M)
        skipped = re.findall(r"skipped=(\d+)", out)
        rows.append((float(case.get("time", 0)), "%s %s" % (label, case.get("name")), case.get("status", ""),
                     int(ran[-1]) if ran else 0, int(skipped[-1]) if ran and skipped else 0))
    return rows


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: test-times.py PHASES_FILE [LABEL=JUNIT_FILE]...")
    spent = phases(sys.argv[1])
    rows = []
    for arg in sys.argv[2:]:
        label, _, path = arg.partition("=")
        try:
            rows += suites(path, label)
        except (OSError, ET.ParseError) as e:
            print("test-times: %s: %s" % (path, e))
    print("test-times: phases")
    for name, seconds in spent:
        print("  %-16s %7.1f min" % (name, seconds / 60))
    print("  %-16s %7.1f min" % ("total", sum(s for _, s in spent) / 60))
    print("test-times: the five slowest suites")
    for seconds, name, status, _, _ in sorted(rows, reverse=True)[:5]:
        print("  %7.1f min  %s%s" % (seconds / 60, name, "" if status in ("run", "") else " (%s)" % status))
    ran, skipped_cases = sum(r[3] for r in rows), sum(r[4] for r in rows)
    print("test-times: %d Python test cases ran in the suites, %d of them skipped" % (ran, skipped_cases))
    failed = len([r for r in rows if r[2] == "fail"])
    skipped = len([r for r in rows if r[2] in ("disabled", "notrun")])
    print("ctest: %d passed, %d failed%s" % (len(rows) - failed - skipped, failed,
                                            ", %d skipped" % skipped if skipped else ""))


if __name__ == "__main__":
    main()
