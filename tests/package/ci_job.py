"""Runs one job of a GitHub Actions workflow file the way a hosted runner runs its `run:` steps:
each with `bash --noprofile --norc -eo pipefail`, in the checkout, with the workflow's, job's and
step's `env:`, as the runner's non-root user; a step that starts with `sudo ` runs as root (the
hosted runner's user has password-less sudo). `uses:` steps are left to the caller (the checkout is
the directory given). The job stops at the first step that fails, as a runner stops it."""
import os
import subprocess

import yaml


def run_job(workflow_path, job, checkout, user=None, env=None, path=None, timeout=600):
    """Returns [(step name, exit status, stdout, stderr)] for the steps run."""
    with open(workflow_path) as f:
        workflow = yaml.safe_load(f)
    spec = workflow["jobs"][job]
    base = {"PATH": path or "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "CI": "true",
            "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": checkout}
    base.update({k: str(v) for k, v in (workflow.get("env") or {}).items()})
    base.update({k: str(v) for k, v in (spec.get("env") or {}).items()})
    done = []
    for step in spec["steps"]:
        if "run" not in step:
            continue
        script = step["run"]
        step_env = dict(base, **{k: str(v) for k, v in (step.get("env") or {}).items()}, **(env or {}))
        prefix = []
        if script.startswith("sudo "):
            script = script[len("sudo "):]
        elif user is not None:
            prefix = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"]
            step_env.setdefault("HOME", "/nonexistent")
        p = subprocess.run(prefix + ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                           cwd=checkout, env=step_env, capture_output=True, text=True, timeout=timeout)
        done.append((step.get("name", script), p.returncode, p.stdout, p.stderr))
        if p.returncode != 0:
            break
    return done
