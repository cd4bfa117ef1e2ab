// Validates rendered Kubernetes manifests and deploy/docker against schemas and kvserve's
// own rules. Run by deploy_check.sh; prints one FAIL line per problem, exits 1 if any.
//   node deploy_check.mjs --modules NODE_MODULES --root REPO --kvserve BIN --rendered NAME=FILE...
import { createRequire } from 'module';
import { readFileSync, existsSync, writeFileSync, mkdtempSync } from 'fs';
import { spawnSync } from 'child_process';
import { join, dirname, resolve } from 'path';
import { tmpdir } from 'os';
import { pathToFileURL } from 'url';
import { isDeepStrictEqual } from 'util';

const args = { rendered: [] };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (key === 'rendered') args.rendered.push(process.argv[i + 1]);
  else args[key] = process.argv[i + 1];
}
const require = createRequire(join(args.modules, '/'));
const YAML = require('yaml');
let failures = 0;
const fail = (where, what) => { failures++; console.log(`FAIL ${where}: ${what}`); };
const check = (cond, where, what) => { if (!cond) fail(where, what); return cond; };

// apiVersion -> module folder holding one class per kind.
const modelPaths = {
  'v1': 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'autoscaling/v2': 'kubernetes-models/autoscaling/v2',
  'keda.sh/v1alpha1': '@kubernetes-models/keda/keda.sh/v1alpha1',
  'monitoring.coreos.com/v1': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1',
};
// Imports each model by file (some packages are ESM-only and export no require() paths).
async function validateSchema(where, obj) {
  const folder = modelPaths[obj.apiVersion];
  if (!check(folder, where, `no schema known for apiVersion ${obj.apiVersion}`)) return;
  let Model;
  try {
    const mod = await import(pathToFileURL(join(args.modules, folder, `${obj.kind}.js`)).href);
    Model = mod[obj.kind] ?? mod.default?.[obj.kind];
  } catch (e) {
    fail(where, `no schema for ${obj.apiVersion} ${obj.kind}: ${e.message}`);
    return;
  }
  if (!check(Model, where, `no schema class for ${obj.kind}`)) return;
  try {
    new Model(obj).validate();
  } catch (e) {
    fail(where, `schema: ${e.message}`);
  }
}

// Runs `kvserve config --dump` with the given KVSERVE_* variables: all must be accepted.
function kvserveAccepts(where, env, configJson) {
  const clean = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('KVSERVE_')) clean[k] = v;
  if (configJson !== undefined) {
    const dir = mkdtempSync(join(tmpdir(), 'kvs-deploy-'));
    writeFileSync(join(dir, 'config.json'), configJson);
    env = { ...env, KVSERVE_CONFIG: join(dir, 'config.json') };
  }
  const r = spawnSync(args.kvserve, ['config', '--dump'], { env: { ...clean, ...env }, encoding: 'utf8' });
  check(r.status === 0, where, `kvserve config --dump rejects the settings: ${r.stderr.trim()}`);
  return r.status === 0 ? JSON.parse(r.stdout) : null;
}

const byKind = (docs, kind, name) => docs.find((d) => d.kind === kind && d.metadata?.name === name);
const subset = (sel, labels) => Object.entries(sel ?? {}).every(([k, v]) => labels?.[k] === v);

async function checkOverlay(name, docs) {
  const w = `overlay ${name}`;
  for (const d of docs) await validateSchema(`${w} ${d.kind}/${d.metadata?.name}`, d);
  const cm = byKind(docs, 'ConfigMap', 'kvserve-env');
  const secret = byKind(docs, 'Secret', 'kvserve-config');
  const svc = byKind(docs, 'Service', 'kvserve');
  check(byKind(docs, 'Deployment', 'kvserve-redis') && byKind(docs, 'Service', 'kvserve-redis'), w, 'Redis missing');
  const alerts = YAML.parse(readFileSync(join(args.root, 'deploy/prometheus/alerts.yml'), 'utf8'));
  const rule = byKind(docs, 'PrometheusRule', 'kvserve');
  if (check(rule, w, 'PrometheusRule kvserve missing')) {
    check(isDeepStrictEqual(rule.spec.groups, alerts.groups), w,
          'PrometheusRule groups differ from deploy/prometheus/alerts.yml (regenerate base/prometheusrule.yaml)');
  }
  const dep = byKind(docs, 'Deployment', 'kvserve');
  if (!check(dep && cm && secret && svc, w, 'Deployment, ConfigMap, Secret or Service kvserve missing')) return;
  const pod = dep.spec.template.spec;
  const c = pod.containers.find((x) => x.name === 'kvserve');
  check(pod.enableServiceLinks === false, w, 'enableServiceLinks must be false');
  check(pod.securityContext?.runAsNonRoot === true, w, 'pod must run as non-root');
  check(c.startupProbe?.httpGet?.path === '/health', w, 'startupProbe must GET /health');
  check(c.livenessProbe?.httpGet?.path === '/health', w, 'livenessProbe must GET /health');
  check(c.readinessProbe?.httpGet?.path === '/ready', w, 'readinessProbe must GET /ready');
  const http = c.ports.find((p) => p.name === 'http');
  check(http?.containerPort === Number(cm.data.KVSERVE_SERVER_HTTP_PORT), w, 'container port http != KVSERVE_SERVER_HTTP_PORT');
  const pre = c.lifecycle?.preStop?.exec?.command ?? [];
  const preSleep = pre[0] === 'sleep' ? Number(pre[1]) : NaN;
  check(Number.isFinite(preSleep), w, 'preStop must be a sleep (endpoint removal before SIGTERM starts the drain)');
  const drain = Number(cm.data.KVSERVE_SERVER_DRAIN_TIMEOUT_SECONDS);
  check(pod.terminationGracePeriodSeconds >= preSleep + drain, w,
        `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} < preStop ${preSleep} s + drain ${drain} s`);
  check(subset(svc.spec.selector, dep.spec.template.metadata.labels), w, 'Service selector does not match the pods');
  check(subset(dep.spec.selector.matchLabels, dep.spec.template.metadata.labels), w, 'Deployment selector does not match its pods');
  const mon = byKind(docs, 'ServiceMonitor', 'kvserve');
  if (check(mon, w, 'ServiceMonitor missing')) {
    check(subset(mon.spec.selector.matchLabels, svc.metadata.labels), w, 'ServiceMonitor selector does not match Service kvserve');
    check(mon.spec.endpoints.every((e) => svc.spec.ports.some((p) => p.name === e.port) && e.path === '/metrics'), w,
          'ServiceMonitor endpoints must name a Service port and /metrics');
  }
  const scaler = byKind(docs, 'ScaledObject', 'kvserve') ?? byKind(docs, 'HorizontalPodAutoscaler', 'kvserve');
  if (check(scaler, w, 'no ScaledObject or HPA')) check(scaler.spec.scaleTargetRef.name === 'kvserve', w, 'autoscaler targets another Deployment');
  // The config file in the Secret and every KVSERVE_* variable must be accepted by kvserve.
  const env = { ...cm.data };
  for (const e of c.env ?? []) env[e.name] = e.value;
  const mount = c.volumeMounts.find((m) => pod.volumes.find((v) => v.name === m.name)?.secret?.secretName === 'kvserve-config');
  check(mount && cm.data.KVSERVE_CONFIG === `${mount.mountPath}/config.json`, w, 'KVSERVE_CONFIG must point at the mounted Secret');
  delete env.KVSERVE_CONFIG;
  const dumped = kvserveAccepts(w, env, secret.stringData['config.json']);
  if (dumped) check(dumped.tenants.length > 0, w, 'the Secret defines no tenant');
  const gpu = c.resources?.limits?.['nvidia.com/gpu'];
  if (name === 'gpu') {
    check(Number(gpu) >= 1, w, 'the GPU overlay must request nvidia.com/gpu');
    check(c.image.endsWith(':cuda'), w, `GPU overlay image ${c.image} is not the CUDA image`);
    check(env.KVSERVE_ENGINE_BACKEND === 'cuda', w, 'GPU overlay must select the cuda backend');
  } else if (name === 'cpu') {
    check(gpu === undefined, w, 'the CPU overlay must not request a GPU');
    check(c.image.endsWith(':cpu'), w, `CPU overlay image ${c.image} is not the CPU image`);
  }
}

function checkCompose() {
  const w = 'deploy/docker/compose.yml';
  const dir = join(args.root, 'deploy/docker');
  const compose = YAML.parse(readFileSync(join(dir, 'compose.yml'), 'utf8'), { merge: true });
  const s = compose.services;
  for (const n of ['kvserve-1', 'kvserve-2', 'redis', 'prometheus', 'grafana']) check(s[n], w, `service ${n} missing`);
  const dockerfile = readFileSync(join(dir, 'Dockerfile'), 'utf8');
  for (const n of ['kvserve-1', 'kvserve-2']) {
    const k = s[n];
    if (!k) continue;
    check(resolve(dir, k.build.context) === resolve(args.root), w, `${n}: build context must be the repository root`);
    check(existsSync(join(args.root, k.build.dockerfile)), w, `${n}: ${k.build.dockerfile} missing`);
    const target = k.build.target.replace(/\$\{KVSERVE_TARGET:-(\w+)\}/, '$1');
    check(new RegExp(`^FROM .* AS ${target}$`, 'm').test(dockerfile), w, `${n}: Dockerfile has no target ${target}`);
    kvserveAccepts(`${w} ${n}`, k.environment);
    check(k.depends_on?.redis, w, `${n} must wait for redis`);
  }
  for (const n of ['prometheus', 'grafana']) {
    for (const v of s[n]?.volumes ?? []) {
      const host = v.split(':')[0];
      check(existsSync(resolve(dir, host)), w, `${n} mounts ${host}, which does not exist`);
    }
  }
  check(s.redis?.command?.includes('allkeys-lru'), w, 'redis must evict with allkeys-lru');
}

// The README's "Building by hand" block: its command lines, in order, are the Dockerfile's
// RUN lines between "# BUILD-STEPS begin" and "# BUILD-STEPS end" (in every build stage).
function checkBuildSteps() {
  const readme = readFileSync(join(args.root, 'README.md'), 'utf8');
  const m = readme.match(/<!-- build-steps -->\s*```bash\n([\s\S]*?)```/);
  if (!check(m, 'README.md', 'no <!-- build-steps --> block')) return;
  const steps = m[1].split('\n').map((l) => l.replace(/\s+#.*$/, '').trim())
    .filter((l) => l && !l.startsWith('#') && !/^[A-Z_]+=\S*$/.test(l));
  const dockerfile = readFileSync(join(args.root, 'deploy/docker/Dockerfile'), 'utf8');
  const blocks = [...dockerfile.matchAll(/# BUILD-STEPS begin\n([\s\S]*?)# BUILD-STEPS end/g)];
  check(blocks.length === 2, 'deploy/docker/Dockerfile', `expected 2 BUILD-STEPS blocks (cpu, cuda), found ${blocks.length}`);
  for (const b of blocks) {
    const runs = b[1].split('\n').filter((l) => l.trim()).map((l) => l.replace(/^RUN\s+/, '').trim());
    check(isDeepStrictEqual(runs, steps), 'deploy/docker/Dockerfile',
          `build steps ${JSON.stringify(runs)} differ from the README's ${JSON.stringify(steps)}`);
  }
}

for (const spec of args.rendered) {
  const [name, file] = spec.split('=');
  const docs = YAML.parseAllDocuments(readFileSync(file, 'utf8')).map((d) => d.toJS()).filter(Boolean);
  if (name === 'hpa') {
    for (const d of docs) await validateSchema(`autoscaling/hpa ${d.kind}`, d);
    check(docs.some((d) => d.kind === 'HorizontalPodAutoscaler'), 'autoscaling/hpa', 'no HPA');
  } else {
    await checkOverlay(name, docs);
  }
}
checkCompose();
checkBuildSteps();
if (failures === 0) console.log('deploy_check.mjs: all checks passed');
process.exit(failures === 0 ? 0 : 1);
