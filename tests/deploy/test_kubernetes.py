"""deploy/kubernetes as a platform team uses it: a copy of the directory with a CA from `sluice ca
init`, rendered by `kubectl kustomize`, every object validated strictly against the Kubernetes and
prometheus-operator schemas (validate.mjs, the @kubernetes-models packages from npm: a wrong type
or an unknown field fails), the restricted pod security and fleet shape checked, and the policy in
the ConfigMap loaded by this sluice."""
import os
import shutil
import subprocess
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "../..")
SLUICE = os.environ.get("SLUICE_BIN") or os.path.join(ROOT, "build/default/sluice")
CACHE = os.environ.get("SLUICE_DEPLOY_CACHE") or (
    "/var/cache/sluice-test-deploy" if os.geteuid() == 0 else os.path.expanduser("~/.cache/sluice-test-deploy"))
PACKAGES = ["kubernetes-models@5.1.0", "@kubernetes-models/prometheus-operator@6.0.0", "js-yaml@4.1.0"]


def npm_modules():
    """The schema packages, installed once into a cache outside the checkout."""
    marker = os.path.join(CACHE, "installed-" + "-".join(p.replace("/", "_") for p in PACKAGES))
    if not os.path.exists(marker):
        os.makedirs(CACHE, exist_ok=True)
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", CACHE] + PACKAGES,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError("npm install of the schema packages failed (is the npm registry reachable?):\n" +
                               p.stderr[-2000:])
        open(marker, "w").close()
    return os.path.join(CACHE, "node_modules")


class KubernetesManifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.tmp.name, "fleet")
        shutil.copytree(os.path.join(ROOT, "deploy/kubernetes"), cls.dir)
        subprocess.run([SLUICE, "ca", "init", "--cert", os.path.join(cls.dir, "ca.pem"),
                        "--key", os.path.join(cls.dir, "ca.key")], check=True, capture_output=True)
        cls.rendered = cls.render(cls.dir)
        cls.objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(cls.rendered) if o}
        # validate.mjs imports its packages from a node_modules beside it.
        shutil.copy(os.path.join(HERE, "validate.mjs"), cls.tmp.name)
        os.symlink(npm_modules(), os.path.join(cls.tmp.name, "node_modules"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @staticmethod
    def render(directory):
        p = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise AssertionError("kubectl kustomize %s failed:\n%s" % (directory, p.stderr))
        return p.stdout

    def validate(self, text):
        return subprocess.run(["node", os.path.join(self.tmp.name, "validate.mjs")], input=text,
                              capture_output=True, text=True, timeout=120)

    def test_every_object_is_valid_against_the_schemas(self):
        p = self.validate(self.rendered)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("valid %d objects" % len(self.objects), p.stdout)
        agents = self.render(os.path.join(ROOT, "deploy/kubernetes/agent-namespace"))
        p = self.validate(agents)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_a_wrong_field_fails(self):
        # The checker itself: a misspelt field, a wrong type and an unknown field in a CRD object.
        for good, bad, expected in (
                ("readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "unknown field /spec/template/spec/containers/0/securityContext/readOnlyRootFileSystem"),
                ("  minAvailable: 1", "  minAvailable: [1]", "minAvailable must be"),
                ("  - interval: 15s", "  - intervalSeconds: 15", "unknown field /spec/endpoints/0/intervalSeconds"),
                ("  replicas: 2", "  replicas: two", "replicas must be integer")):
            self.assertIn(good, self.rendered)
            p = self.validate(self.rendered.replace(good, bad, 1))
            self.assertEqual(p.returncode, 1, (bad, p.stdout))
            self.assertIn(expected, p.stdout)

    def test_the_fleet_shape(self):
        o = self.objects
        deploy = o[("Deployment", "sluice")]
        self.assertGreaterEqual(deploy["spec"]["replicas"], 2)
        self.assertEqual(deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0)
        pod = deploy["spec"]["template"]["spec"]
        keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
        self.assertEqual(keys, {"topology.kubernetes.io/zone", "kubernetes.io/hostname"})
        self.assertEqual(o[("PodDisruptionBudget", "sluice")]["spec"]["minAvailable"], 1)
        hpa = o[("HorizontalPodAutoscaler", "sluice")]["spec"]
        self.assertEqual((hpa["minReplicas"], hpa["scaleTargetRef"]["name"]), (2, "sluice"))
        svc = o[("Service", "sluice")]["spec"]
        self.assertEqual({p["name"]: p["port"] for p in svc["ports"]}, {"proxy": 3128, "admin": 9090})
        c = pod["containers"][0]
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(o[("ServiceMonitor", "sluice")]["spec"]["endpoints"][0]["port"], "admin")
        # The policy and the CA come from the ConfigMap and the Secret, mounted read-only.
        vols = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(vols["policy"]["configMap"]["name"], "sluice-policy")
        self.assertEqual(vols["ca"]["secret"]["secretName"], "sluice-ca")
        self.assertTrue(all(m["readOnly"] for m in c["volumeMounts"]))
        self.assertIn(("ConfigMap", "sluice-policy"), o)
        self.assertEqual(set(o[("Secret", "sluice-ca")]["data"]), {"ca.pem", "ca.key"})
        # Grace: the drain delay and the drain fit in the termination grace period.
        self.assertGreater(pod["terminationGracePeriodSeconds"], 5 + 10)

    def test_restricted_pod_security(self):
        ns = self.objects[("Namespace", "sluice")]
        self.assertEqual(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted")
        pod = self.objects[("Deployment", "sluice")]["spec"]["template"]["spec"]
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(pod["securityContext"]["runAsUser"], 0)
        self.assertEqual(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault")
        self.assertFalse(pod["automountServiceAccountToken"])
        for c in pod["containers"]:
            sc = c["securityContext"]
            self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
            self.assertNotIn("add", sc["capabilities"])
            self.assertFalse(sc["allowPrivilegeEscalation"])
            self.assertTrue(sc["readOnlyRootFilesystem"])
            self.assertTrue(sc["runAsNonRoot"])

    def test_agent_namespaces_egress_only_to_sluice_and_dns(self):
        agents = [o for o in yaml.safe_load_all(self.render(os.path.join(ROOT, "deploy/kubernetes/agent-namespace"))) if o]
        self.assertEqual(len(agents), 1)
        np = agents[0]["spec"]
        self.assertEqual(np["podSelector"], {})
        self.assertEqual(np["policyTypes"], ["Egress"])
        ports = sorted((p["port"], p["protocol"]) for rule in np["egress"] for p in rule["ports"])
        self.assertEqual(ports, [(53, "TCP"), (53, "UDP"), (3128, "TCP")])
        to_sluice = [r for r in np["egress"] if r["ports"][0]["port"] == 3128][0]["to"][0]
        self.assertEqual(to_sluice["podSelector"]["matchLabels"], {"app.kubernetes.io/name": "sluice"})
        self.assertEqual(to_sluice["namespaceSelector"]["matchLabels"], {"kubernetes.io/metadata.name": "sluice"})

    def test_the_configmap_policy_loads_with_its_roles(self):
        text = self.objects[("ConfigMap", "sluice-policy")]["data"]["sluice.toml"]
        cfg = os.path.join(self.tmp.name, "sluice.toml")
        # The paths of the pod, pointed at this copy's CA.
        with open(cfg, "w") as f:
            f.write(text.replace("/etc/sluice/ca/", self.dir + "/"))
        p = subprocess.run([SLUICE, "check", "--config", cfg, "--client", "replace-me", "GET", "https://pypi.org/simple/"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("ALLOW", p.stdout)
        p = subprocess.run([SLUICE, "check", "--config", cfg, "--client", "replace-me", "POST", "https://pypi.org/x"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)


if __name__ == "__main__":
    unittest.main()
