#!/usr/bin/env python3
"""Makes a container engine's seccomp profile let `sluice exec` build its sandbox inside the
container, and changes nothing else.

usage: seccomp-profile.py BASE.json > sluice-seccomp.json

BASE is the engine's default profile (Docker's is moby's profiles/seccomp/default.json; podman's is
/usr/share/containers/seccomp.json). Docker's default allows these calls only to a container that holds
CAP_SYS_ADMIN (and clone only without namespace flags, clone3 never): the result allows them to every
process in the container, without a capability, and leaves every other rule as BASE has it. The
sandbox needs them for its user, mount, PID and network namespaces (clone, unshare), its file system
view (mount, umount2, pivot_root, open_tree, move_mount, mount_setattr) and Landlock. clone3 is left
as BASE has it: where it is refused with ENOSYS, glibc falls back to clone.

deploy/container/seccomp.json is this script's output for Debian 12's podman default
(containers-common), which already allows all of them."""
import json
import sys

NEEDED = ["clone", "unshare", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "mount_setattr",
          "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"]


def sluice_profile(base):
    out = dict(base)
    rules = []
    for rule in base.get("syscalls") or []:
        names = [n for n in rule.get("names", []) if n not in NEEDED]
        if rule.get("name") in NEEDED:  # the old one-name form
            continue
        if not names and rule.get("names"):
            continue
        rule = dict(rule)
        if "names" in rule:
            rule["names"] = names
        rules.append(rule)
    rules.append({"names": NEEDED, "action": "SCMP_ACT_ALLOW",
                  "comment": "sluice exec: its namespaces, its file system view and Landlock"})
    out["syscalls"] = rules
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        with open(argv[1]) as f:
            base = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write("seccomp-profile.py: cannot read the base profile %s: %s; give the engine's default "
                         "profile (a JSON file with defaultAction and syscalls)\n" % (argv[1], e))
        return 1
    if not isinstance(base, dict) or "defaultAction" not in base:
        sys.stderr.write("seccomp-profile.py: %s is not a seccomp profile (no defaultAction); give the engine's "
                         "default profile\n" % argv[1])
        return 1
    json.dump(sluice_profile(base), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
