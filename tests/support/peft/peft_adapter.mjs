// Writes a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) with
// seeded random F32 lora_A / lora_B matrices, from the formats' descriptions: safetensors is a
// u64 little-endian header length, a JSON header of {dtype, shape, data_offsets} per tensor,
// then the raw data; PEFT names each module's pair
// base_model.model.<module>.lora_A.weight [r, in] and .lora_B.weight [out, r].
// Shared by the Node client tests (tests/integration/server/node) and bench/lora_serve.sh.
//
//   writeAdapter(dir, {rank, alpha, modules: {"model.layers.0.self_attn.q_proj": [in, out], ...},
//                      targets: ["q_proj", ...], seed, scale})
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

// A seeded uniform generator on [-0.5, 0.5) (xorshift32): the same adapter every run.
function uniform(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    return x / 4294967296 - 0.5;
  };
}

export function writeSafetensors(file, tensors) {
  const header = {};
  let offset = 0;
  for (const [name, { shape, data }] of Object.entries(tensors)) {
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + data.byteLength] };
    offset += data.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  const parts = [len, Buffer.from(json)];
  for (const { data } of Object.values(tensors)) parts.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  writeFileSync(file, Buffer.concat(parts));
}

// Modules of a Llama-style model: every layer's `targets` with their [in, out] sizes.
export function llamaModules({ layers, hidden, qOut, kvOut, intermediate, targets }) {
  const size = { q_proj: [hidden, qOut], k_proj: [hidden, kvOut], v_proj: [hidden, kvOut], o_proj: [qOut, hidden],
                 gate_proj: [hidden, intermediate], up_proj: [hidden, intermediate], down_proj: [intermediate, hidden] };
  const group = (t) => (['gate_proj', 'up_proj', 'down_proj'].includes(t) ? 'mlp' : 'self_attn');
  const out = {};
  for (let l = 0; l < layers; ++l) for (const t of targets) out[`model.layers.${l}.${group(t)}.${t}`] = size[t];
  return out;
}

export function writeAdapter(dir, { rank, alpha, modules, targets, seed, scale = 0.5 }) {
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify({
    peft_type: 'LORA', r: rank, lora_alpha: alpha, target_modules: targets, lora_dropout: 0.0, bias: 'none',
    task_type: 'CAUSAL_LM' }));
  const rand = uniform(seed);
  const matrix = (rows, cols) => {
    const data = new Float32Array(rows * cols);
    for (let i = 0; i < data.length; ++i) data[i] = scale * rand();
    return { shape: [rows, cols], data };
  };
  const tensors = {};
  for (const [module, [inF, outF]] of Object.entries(modules)) {
    tensors[`base_model.model.${module}.lora_A.weight`] = matrix(rank, inF);
    tensors[`base_model.model.${module}.lora_B.weight`] = matrix(outF, rank);
  }
  writeSafetensors(path.join(dir, 'adapter_model.safetensors'), tensors);
  return dir;
}
