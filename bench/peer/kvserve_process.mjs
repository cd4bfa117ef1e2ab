// A kvserve daemon started for a benchmark: `kvserve serve` on ephemeral ports, found through
// the "kvserve listening http=H:P" line it prints, stopped with SIGTERM (only this child).
// Plus the few OpenAI HTTP calls the benchmarks make. Shared by peer_bench.mjs and serve_load.mjs.
import {spawn} from "node:child_process";

const now = () => Number(process.hrtime.bigint()) / 1e9;

export class KvserveProcess {
  static async start(bin, model, threads, extra) {
    const args = ["serve", ...(model ? ["--model", model] : []), "--host", "127.0.0.1", "--http-port", "0",
                  "--grpc-port", "0", "--threads", String(threads), "--log-level", "warn", ...extra];
    const child = spawn(bin, args, {stdio: ["ignore", "pipe", "inherit"]});
    let out = "";
    const url = await new Promise((resolve, reject) => {
      child.on("exit", (code) => reject(new Error(`kvserve exited (${code}) before listening: ${out}`)));
      child.stdout.on("data", (d) => {
        out += d;
        const m = out.match(/kvserve listening http=([^ :]+):(\d+) grpc=/);
        if (m) resolve(`http://${m[1]}:${m[2]}`);
      });
    });
    const k = new KvserveProcess();
    k.child = child;
    k.url = url;
    return k;
  }

  // An already running server (nothing to stop).
  static attach(url) {
    const k = new KvserveProcess();
    k.url = url.replace(/\/$/, "");
    return k;
  }

  async stop() {
    if (!this.child) return;
    const done = new Promise((r) => this.child.once("exit", r));
    this.child.kill("SIGTERM");
    await done;
  }

  async post(route, body) {
    const r = await fetch(this.url + route, {method: "POST", headers: {"content-type": "application/json"},
                                             body: JSON.stringify(body)});
    const text = await r.text();
    if (!r.ok) throw new Error(`kvserve ${route}: HTTP ${r.status}: ${text}`);
    return JSON.parse(text);
  }

  async tokenize(text) { return (await this.post("/tokenize", {prompt: text})).tokens; }

  async greedy(ids, n) {
    const j = await this.post("/v1/completions", {prompt: ids, max_tokens: n, temperature: 0, ignore_eos: true,
                                                  return_token_ids: true});
    return j.choices[0].token_ids;
  }

  async prefillSeconds(ids) {
    const t0 = now();
    await this.post("/v1/completions", {prompt: ids, max_tokens: 1, temperature: 0, ignore_eos: true});
    return now() - t0;
  }

  // One streamed completion; calls onTokens(count, time) for every SSE event that carries
  // tokens (an event may carry several when steps outpace the stream). Returns the total.
  async stream(body, onTokens) {
    const r = await fetch(this.url + "/v1/completions", {
      method: "POST", headers: {"content-type": "application/json"},
      body: JSON.stringify({...body, stream: true, return_token_ids: true})});
    if (!r.ok) throw new Error(`kvserve stream: HTTP ${r.status}: ${await r.text()}`);
    const decoder = new TextDecoder();
    let buf = "", total = 0;
    for await (const chunk of r.body) {
      buf += decoder.decode(chunk, {stream: true});
      let at;
      while ((at = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
        const j = JSON.parse(event.slice(6));
        if (j.error) throw new Error(`kvserve stream error: ${JSON.stringify(j.error)}`);
        const got = j.choices?.[0]?.token_ids?.length ?? 0;
        if (got > 0) {
          total += got;
          onTokens(got, now());
        }
      }
    }
    return total;
  }
}
