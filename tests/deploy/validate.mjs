// Validates every object of a multi-document YAML stream (stdin) against the Kubernetes and
// prometheus-operator schemas of the @kubernetes-models packages, strictly: besides what the
// schemas check (types, required fields, enums), a field the schema does not know is an error.
// The schemas' compiled validators read exactly the properties they know (and enumerate the keys
// of maps); every object is wrapped in a Proxy that records both, so a key never read is unknown.
// Prints one line per error and exits 1 if there was any; prints "valid N objects" otherwise.
import { readFileSync } from "node:fs";
import yaml from "js-yaml";

const groups = {
  "v1": "kubernetes-models/v1",
  "apps/v1": "kubernetes-models/apps/v1",
  "policy/v1": "kubernetes-models/policy/v1",
  "autoscaling/v2": "kubernetes-models/autoscaling/v2",
  "networking.k8s.io/v1": "kubernetes-models/networking.k8s.io/v1",
  "monitoring.coreos.com/v1": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1",
};

function watched(value, path, seen, cache = new WeakMap()) {
  if (value === null || typeof value !== "object") return value;
  if (cache.has(value)) return cache.get(value);
  const record = { read: new Set(), all: false, path, value };
  seen.push(record);
  const proxy = new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key === "string") record.read.add(key);
      const v = Reflect.get(target, key, receiver);
      return typeof key === "string" && Object.prototype.hasOwnProperty.call(target, key)
        ? watched(v, path + "/" + key, seen, cache) : v;
    },
    ownKeys(target) {
      record.all = true;
      return Reflect.ownKeys(target);
    },
    has(target, key) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.has(target, key);
    },
  });
  cache.set(value, proxy);
  return proxy;
}

const docs = yaml.loadAll(readFileSync(0, "utf8")).filter((d) => d);
// Secret data is base64 that the API server decodes ignoring line breaks (Go's base64 decoder), and
// kustomize folds long values: the schema's "byte" format does not allow for that.
for (const doc of docs) {
  if (doc.kind === "Secret" && doc.data) {
    for (const k of Object.keys(doc.data)) doc.data[k] = String(doc.data[k]).replace(/[\r\n]/g, "");
  }
}
let errors = 0;
for (const doc of docs) {
  const where = `${doc.kind}/${doc.metadata?.name}`;
  const module = groups[doc.apiVersion];
  if (!module) {
    console.log(`${where}: apiVersion ${doc.apiVersion} has no schema here`);
    errors++;
    continue;
  }
  const models = await import(module);
  const Model = models[doc.kind];
  if (!Model) {
    console.log(`${where}: no ${doc.kind} in ${doc.apiVersion}`);
    errors++;
    continue;
  }
  try {
    new Model(doc).validate();
  } catch (e) {
    console.log(`${where}: ${e.message}`);
    errors++;
    continue;
  }
  // Unknown fields: the schema's validator once more, on a watched plain copy.
  const seen = [];
  const plain = JSON.parse(JSON.stringify(new Model(doc).toJSON()));
  try {
    Model.prototype.validate.call(watched(plain, "", seen));
  } catch (e) {
    // reported above
  }
  for (const r of seen) {
    if (r.all || Array.isArray(r.value)) continue;
    for (const key of Object.keys(r.value)) {
      if (!r.read.has(key)) {
        console.log(`${where}: unknown field ${r.path}/${key}`);
        errors++;
      }
    }
  }
}
if (errors) process.exit(1);
console.log(`valid ${docs.length} objects`);
