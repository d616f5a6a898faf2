// Runs an ONNX model once on ONNX Runtime's CPU provider: argv[2] a JSON spec
// {"module", "model", "inputs": [{"name", "path", "shape"}] (float32 raw), "out": path}; writes the first output (float32 raw).
'use strict';
const fs = require('fs');
(async () => {
  const spec = JSON.parse(process.argv[2]);
  const ort = require(spec.module);
  const session = await ort.InferenceSession.create(spec.model, { executionProviders: ['cpu'], graphOptimizationLevel: 'all' });
  const feeds = {};
  for (const t of spec.inputs) {
    const buf = fs.readFileSync(t.path);
    feeds[t.name] = new ort.Tensor('float32', new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength)), t.shape);
  }
  const out = (await session.run(feeds))[session.outputNames[0]];
  fs.writeFileSync(spec.out, Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength));
})().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
