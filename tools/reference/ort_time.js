#!/usr/bin/env node
// ONNX Runtime baseline for anvil's BERT-stack benchmark: times DIR/model.onnx (written by
// `bert_stack.py --onnx`) on DIR/input.npy and DIR/mask.npy, checks its output against DIR/output.npy, and prints
// one JSON line {"ort_ms_best", "ort_ms_median", "threads", "onnxruntime", "max_abs_vs_output"}, also written to
// DIR/ort_timing.json.
//
// Needs onnxruntime-node@1.18.0 (newer versions download the library at install time, which fails here):
//   npm install onnxruntime-node@1.18.0 --ignore-scripts --prefix /tmp/ort
//   NODE_PATH=/tmp/ort/node_modules node tools/reference/ort_time.js DIR --threads 2 --runs 20
'use strict';

const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

function parseArguments(argv) {
  const options = {dir: null, threads: 1, runs: 20, warmup: 3};
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    if (flag === '--threads' || flag === '--runs' || flag === '--warmup') {
      options[flag.slice(2)] = parseInt(argv[++i], 10);
    } else if (!flag.startsWith('--') && options.dir === null) {
      options.dir = flag;
    } else {
      throw new Error(`unknown argument ${flag}; usage: ort_time.js DIR [--threads N] [--runs N] [--warmup N]`);
    }
  }
  if (options.dir === null) throw new Error('usage: ort_time.js DIR [--threads N] [--runs N] [--warmup N]');
  return options;
}

// A .npy reader for what bert_stack.py writes: little-endian float32, C order.
function readNpyFloat32(file) {
  const bytes = fs.readFileSync(file);
  if (bytes.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = bytes[6];
  const headerLength = major === 1 ? bytes.readUInt16LE(8) : bytes.readUInt32LE(8);
  const headerStart = major === 1 ? 10 : 12;
  const header = bytes.toString('latin1', headerStart, headerStart + headerLength);
  if (!header.includes("'<f4'") || header.includes("'fortran_order': True")) {
    throw new Error(`${file}: expected C-order little-endian float32, header ${header.trim()}`);
  }
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim() !== '').map(Number);
  const dataStart = headerStart + headerLength;
  const values = new Float32Array(bytes.buffer.slice(bytes.byteOffset + dataStart, bytes.byteOffset + bytes.length));
  return {shape, values};
}

function median(sorted) {
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

async function main() {
  const options = parseArguments(process.argv.slice(2));
  const input = readNpyFloat32(path.join(options.dir, 'input.npy'));
  const mask = readNpyFloat32(path.join(options.dir, 'mask.npy'));
  const expected = readNpyFloat32(path.join(options.dir, 'output.npy'));
  const session = await ort.InferenceSession.create(path.join(options.dir, 'model.onnx'), {
    intraOpNumThreads: options.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const feeds = {
    hidden_states: new ort.Tensor('float32', input.values, input.shape),
    attention_mask: new ort.Tensor('float32', mask.values, mask.shape),
  };

  let output = null;
  for (let i = 0; i < options.warmup; ++i) output = (await session.run(feeds)).last_hidden_state;
  const times = [];
  for (let i = 0; i < options.runs; ++i) {
    const start = process.hrtime.bigint();
    output = (await session.run(feeds)).last_hidden_state;
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  if (output === null) output = (await session.run(feeds)).last_hidden_state;

  let maxAbs = 0;
  for (let i = 0; i < expected.values.length; ++i) {
    maxAbs = Math.max(maxAbs, Math.abs(output.data[i] - expected.values[i]));
  }
  if (output.data.length !== expected.values.length) maxAbs = Infinity;
  times.sort((a, b) => a - b);
  const round = (ms) => Math.round(ms * 1000) / 1000;
  const result = {
    ort_ms_best: times.length ? round(times[0]) : null,
    ort_ms_median: times.length ? round(median(times)) : null,
    threads: options.threads,
    onnxruntime: require('onnxruntime-node/package.json').version,
    runs: options.runs,
    max_abs_vs_output: maxAbs,
  };
  const line = JSON.stringify(result);
  console.log(line);
  fs.writeFileSync(path.join(options.dir, 'ort_timing.json'), line + '\n');
}

main().catch((error) => {
  console.error(`ort_time.js: ${error.message}`);
  process.exit(1);
});
