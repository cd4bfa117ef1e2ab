// What every Node client test here shares: its arguments, the server it starts and stops, and
// its checks and report. A script calls, in order:
//
//   const t = parseArgs('name.mjs', ['modules', 'proto']);   // --modules DIR ... -- SERVER_CMD...
//   const server = await startServer(t.serverCmd, writeConfig('prefix', {...}));
//   await check('what', async () => { ... });                 // as many as it has
//   await finish(server);                                     // SIGTERM, exit 0 checked, report
//
// SERVER_CMD is `kvserve serve` or the fake-engine server: it is started with
// `--config <tmp>.json` appended, must print "kvserve listening http=H:P grpc=H:P" and must
// exit 0 on SIGTERM.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';

// --key value pairs before `--`, the server command after it. `required` names the keys a
// script cannot run without. realEngine: the command serves the bundled model.
export function parseArgs(script, required) {
  const argv = process.argv.slice(2);
  const sep = argv.indexOf('--');
  const opts = {};
  for (let i = 0; i < sep; i += 2) opts[argv[i].replace(/^--/, '')] = argv[i + 1];
  const serverCmd = argv.slice(sep + 1);
  if (sep < 0 || required.some((k) => !opts[k]) || serverCmd.length === 0) {
    console.error(`usage: ${script} ${required.map((k) => `--${k} ARG`).join(' ')} [--KEY ARG...] -- SERVER_CMD...`);
    process.exit(2);
  }
  return {
    opts,
    serverCmd,
    realEngine: serverCmd[serverCmd.length - 1] === 'serve',
    require: createRequire(path.join(opts.modules, 'noop.js')),
  };
}

// A config file in a fresh temporary directory.
export function writeConfig(prefix, config) {
  const file = path.join(mkdtempSync(path.join(tmpdir(), `kvserve-${prefix}-`)), 'kvserve.json');
  writeFileSync(file, JSON.stringify(config));
  return file;
}

// Loopback ports chosen by the server, warnings only, one tenant with `key`.
export function baseConfig(key, extra = {}) {
  return {
    logging: { level: 'warn' },
    server: { host: '127.0.0.1', http_port: 0, grpc_port: 0, drain_timeout_seconds: 2 },
    tenants: [{ name: 'node', api_keys: [key] }],
    ...extra,
  };
}

export function startServer(serverCmd, configPath) {
  return new Promise((resolve, reject) => {
    const child = spawn(serverCmd[0], [...serverCmd.slice(1), '--config', configPath],
                        { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no listening line; stdout: ${out}`)), 120000);
    child.on('exit', (code) => reject(new Error(`server exited early with ${code}; stdout: ${out}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/kvserve listening http=([^ :]+):(\d+) grpc=([^ :]+):(\d+)\n/);
      if (m) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve({ child, host: m[1], httpPort: Number(m[2]), grpcPort: Number(m[4]) });
      }
    });
  });
}

// SIGTERM, and the exit code. With closePool, Node's fetch pool (the OpenAI SDK's idle
// keep-alive connections) is closed first, for good: the server's stop would otherwise wait
// for them (~3 s). Only at the end of a script: no fetch works after it.
export async function stopServer(server, { closePool = false } = {}) {
  if (closePool) await globalThis[Symbol.for('undici.globalDispatcher.1')]?.close?.();
  return new Promise((resolve) => {
    server.child.on('exit', (code) => resolve(code));
    server.child.kill('SIGTERM');
  });
}

const results = [];
export async function check(name, fn) {
  try {
    await fn();
    results.push([name, null]);
    console.log(`ok   ${name}`);
  } catch (e) {
    results.push([name, e]);
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}

// Stops `server` (its exit code is one more check), prints the tally and exits 1 on a failure.
export async function finish(server) {
  const exitCode = await stopServer(server, { closePool: true });
  await check('server exits 0 on SIGTERM', async () => assert.equal(exitCode, 0));
  const failed = results.filter(([, e]) => e);
  console.log(`${results.length - failed.length}/${results.length} passed`);
  process.exit(failed.length ? 1 : 0);
}
