// onnx_stats.mjs - counts a model.onnx's nodes without an ONNX library: a minimal protobuf reader
// for the few ModelProto fields it needs (weights are external, so the file is small).
//
// usage: node bench/onnx_stats.mjs MODEL.onnx    prints JSON {nodes, ops, initializer_fed, ...}
//        node bench/onnx_stats.mjs --per-token-bytes MODEL.onnx
//                                                prints initializer_bytes - gather_table_bytes
//   initializer_fed: Transpose / Identity / Cast nodes whose data input is an initializer, work a
//   runtime redoes at every session creation (or constant-folds, holding both copies meanwhile).
//   initializer_bytes: all initializers' bytes; gather_table_bytes: those of initializers read only
//   as a Gather's data (an embedding table: a decode step reads one row of it, not all of it).
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

function varint(buf, pos) {
  let v = 0n, shift = 0n;
  for (;;) {
    const b = buf[pos++];
    v |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return [v, pos];
    shift += 7n;
  }
}

// Yields [field, wireType, value] where value is a Buffer for length-delimited fields.
function* fields(buf) {
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = varint(buf, pos);
    const field = Number(key >> 3n), wt = Number(key & 7n);
    if (wt === 0) {
      let v;
      [v, pos] = varint(buf, pos);
      yield [field, wt, v];
    } else if (wt === 1) {
      yield [field, wt, buf.subarray(pos, pos + 8)];
      pos += 8;
    } else if (wt === 2) {
      let len;
      [len, pos] = varint(buf, pos);
      const n = Number(len);
      yield [field, wt, buf.subarray(pos, pos + n)];
      pos += n;
    } else if (wt === 5) {
      yield [field, wt, buf.subarray(pos, pos + 4)];
      pos += 4;
    } else {
      throw new Error(`unsupported wire type ${wt}`);
    }
  }
}

export function onnxStats(path) {
  const model = readFileSync(path);
  let graph = null;
  const opsets = {};
  for (const [f, , v] of fields(model)) {
    if (f === 7) graph = v;                       // ModelProto.graph
    if (f === 8) {                                // ModelProto.opset_import
      let domain = '', version = 0;
      for (const [g, , w] of fields(v)) {
        if (g === 1) domain = w.toString();
        if (g === 2) version = Number(w);
      }
      opsets[domain || 'ai.onnx'] = version;
    }
  }
  if (!graph) throw new Error(`${path}: no graph`);
  const nodes = [];
  const inits = new Set();
  const initBytes = new Map();
  for (const [f, , v] of fields(graph)) {
    if (f === 1) {                                // GraphProto.node
      const n = { inputs: [], op: '', domain: '' };
      for (const [g, , w] of fields(v)) {
        if (g === 1) n.inputs.push(w.toString());
        else if (g === 4) n.op = w.toString();
        else if (g === 7) n.domain = w.toString();
      }
      nodes.push(n);
    } else if (f === 5) {                         // GraphProto.initializer
      let name = '', bytes = 0;
      for (const [g, , w] of fields(v)) {
        if (g === 8) name = w.toString();         // TensorProto.name
        else if (g === 9) bytes = w.length;       // raw_data
        else if (g === 13) {                      // external_data: key 1, value 2
          let k = '', val = '';
          for (const [h, , x] of fields(w)) {
            if (h === 1) k = x.toString();
            if (h === 2) val = x.toString();
          }
          if (k === 'length') bytes = Number(val);
        }
      }
      inits.add(name);
      initBytes.set(name, bytes);
    }
  }
  const ops = {};
  let fed = 0;
  const uses = new Map();
  for (const n of nodes)
    n.inputs.forEach((x, i) => {
      if (!inits.has(x)) return;
      const u = uses.get(x) ?? { gatherData: 0, other: 0 };
      if (n.op === 'Gather' && !n.domain && i === 0) u.gatherData++;
      else u.other++;
      uses.set(x, u);
    });
  let total = 0, gather = 0;
  for (const [name, b] of initBytes) {
    total += b;
    const u = uses.get(name);
    if (u && u.gatherData && !u.other) gather += b;
  }
  for (const n of nodes) {
    const key = (n.domain && n.domain !== 'ai.onnx' ? n.domain + '.' : '') + n.op;
    ops[key] = (ops[key] || 0) + 1;
    if (['Transpose', 'Identity', 'Cast'].includes(n.op) && !n.domain && inits.has(n.inputs[0])) fed++;
  }
  return {
    nodes: nodes.length, initializers: inits.size, initializer_fed: fed,
    initializer_bytes: total, gather_table_bytes: gather, opsets, ops,
  };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  if (process.argv[2] === '--per-token-bytes') {
    const s = onnxStats(process.argv[3]);
    console.log(s.initializer_bytes - s.gather_table_bytes);
  } else {
    console.log(JSON.stringify(onnxStats(process.argv[2]), null, 1));
  }
}
