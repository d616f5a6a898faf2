// ONNX Runtime's per-node times: one ONNX model on the CPU provider (as
// ort_worker.js runs it: all graph optimizations, T intra-op threads), run
// `runs` times with its profiler on; prints the profile file's path.
//
//   node ort_profile.js MODULE MODEL.onnx INPUT_NAME SHAPE_JSON THREADS RUNS PREFIX
//
// The input is 0.5 everywhere (times do not depend on the values).
'use strict';

async function main() {
  const [mod, model, name, shapeJson, threads, runs, prefix] = process.argv.slice(2);
  const ort = require(mod);
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'], graphOptimizationLevel: 'all', intraOpNumThreads: Number(threads),
    interOpNumThreads: 1, executionMode: 'sequential', enableProfiling: true, profileFilePrefix: prefix });
  const shape = JSON.parse(shapeJson);
  const x = new ort.Tensor('float32', new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(0.5), shape);
  for (let i = 0; i < Number(runs); ++i) await session.run({ [name]: x });
  session.endProfiling();
  process.stdout.write(JSON.stringify({ prefix }) + '\n');
}

main().catch((err) => { process.stderr.write(`ort_profile: ${err && err.message ? err.message : err}\n`); process.exit(1); });
