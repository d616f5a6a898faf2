// ONNX Runtime as a peer worker: one ONNX model on its CPU provider, warmed
// up once, timed on request. Speaks worker.py's protocol (JSON lines):
//
//   -> (at start) {"ready": true, "label": "...", "check_error": e, "env": {...}, "seconds_per_call": s}
//                 or {"ready": false, "error": "..."}
//   <- {"op": "time", "repeats": 1, "repeat_ms": 50}
//   -> {"times": [seconds per call, ...], "number": n}
//   <- {"op": "quit"}
//
// argv[2] is the spec: {"module": dir of onnxruntime-node, "model": path.onnx,
// "inputs": [{"name", "path" (raw little-endian data), "shape", "dtype"}],
// "reference": {"path", "shape"} or null (float32 raw: the first output's
// expected value), "threads": T}. ONNX Runtime runs as its users run it at its
// best: all graph optimizations, T intra-op threads, its default spinning.
'use strict';
const fs = require('fs');
const readline = require('readline');

function reply(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }

const TYPED = { float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array };

function loadTensor(ort, t) {
  const Typed = TYPED[t.dtype];
  if (!Typed) throw new Error(`input '${t.name}': dtype ${t.dtype} is not supported by this worker`);
  const buf = fs.readFileSync(t.path);
  const data = new Typed(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  return new ort.Tensor(t.dtype, data, t.shape);
}

// max |got - want| / max |want|, as torch_models.rel_err.
function relErr(got, want) {
  if (got.length !== want.length) return Infinity;
  let diff = 0, scale = 1e-30;
  for (let i = 0; i < got.length; ++i) {
    diff = Math.max(diff, Math.abs(got[i] - want[i]));
    scale = Math.max(scale, Math.abs(want[i]));
  }
  return Number.isNaN(diff) ? NaN : diff / scale;
}

async function timeCalls(run, repeats, number) {
  const times = [];
  for (let r = 0; r < repeats; ++r) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < number; ++i) await run();
    times.push(Number(process.hrtime.bigint() - t0) * 1e-9 / number);
  }
  return times;
}

async function main() {
  const spec = JSON.parse(process.argv[2]);
  const ort = require(spec.module);
  const threads = Number(spec.threads);
  const options = { executionProviders: ['cpu'], graphOptimizationLevel: 'all', intraOpNumThreads: threads,
                    interOpNumThreads: 1, executionMode: 'sequential' };
  const session = await ort.InferenceSession.create(spec.model, options);
  const feeds = {};
  for (const t of spec.inputs) feeds[t.name] = loadTensor(ort, t);
  const run = () => session.run(feeds);
  let check = null;
  if (spec.reference) {
    const out = (await run())[session.outputNames[0]];
    const buf = fs.readFileSync(spec.reference.path);
    const want = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
    check = relErr(out.data, want);
  }
  // Warm-up: 5 calls and at least 1 s, as the PyTorch peers.
  let calls = 0;
  const t0 = process.hrtime.bigint();
  while (calls < 5 || Number(process.hrtime.bigint() - t0) * 1e-9 < 1.0) { await run(); ++calls; }
  const one = Math.max(Number(process.hrtime.bigint() - t0) * 1e-9 / calls, 1e-7);
  const version = require(spec.module + '/package.json').version;
  const label = `ONNX Runtime ${version} (onnxruntime-node, CPU provider, graph optimization all, ` +
                `intra-op threads ${threads}, default spinning)`;
  const env = {};
  for (const k of Object.keys(process.env)) if (/^(OMP_|OPENBLAS_|MKL_|KILN_)/.test(k)) env[k] = process.env[k];
  reply({ ready: true, label, check_error: check, env, seconds_per_call: one });
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (!line.trim()) continue;
    const req = JSON.parse(line);
    if (req.op === 'quit') break;
    if (req.op !== 'time') { reply({ error: `unknown op ${JSON.stringify(req.op)}` }); continue; }
    const repeatS = Number(req.repeat_ms === undefined ? 50 : req.repeat_ms) * 1e-3;
    const number = Math.max(1, Math.ceil(repeatS / one - 1e-3));
    reply({ times: await timeCalls(run, Number(req.repeats || 1), number), number });
  }
  process.exit(0);
}

main().catch((err) => { reply({ ready: false, error: `ort_worker: ${err && err.message ? err.message : err}` }); process.exit(1); });
