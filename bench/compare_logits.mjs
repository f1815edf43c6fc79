// compare_logits.mjs - compares two logits dumps of bench/decode.mjs --dump (float32 rows of
// VOCAB values, one row per position).
//
// usage: node bench/compare_logits.mjs A.f32 B.f32 VOCAB
// Prints JSON: positions, max_abs_diff, max_abs (of A, for scale), rel_rms (rms of the difference
// over rms of A), top1_agree (positions whose argmax is the same), top1_total.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

export function compareLogits(pathA, pathB, vocab) {
  const load = (p) => {
    const b = readFileSync(p);
    return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  };
  const a = load(pathA), b = load(pathB);
  if (a.length !== b.length || a.length % vocab) throw new Error(`${pathA} and ${pathB} differ in size`);
  const positions = a.length / vocab;
  let maxDiff = 0, maxAbs = 0, agree = 0, sd = 0, sa = 0;
  for (let p = 0; p < positions; p++) {
    let ia = 0, ib = 0;
    for (let v = 0; v < vocab; v++) {
      const i = p * vocab + v;
      const d = Math.abs(a[i] - b[i]);
      if (!(d <= maxDiff)) maxDiff = d; // NaN propagates
      maxAbs = Math.max(maxAbs, Math.abs(a[i]));
      sd += d * d;
      sa += a[i] * a[i];
      if (a[i] > a[p * vocab + ia]) ia = v;
      if (b[i] > b[p * vocab + ib]) ib = v;
    }
    if (ia === ib) agree++;
  }
  return {
    positions, max_abs_diff: maxDiff, max_abs: maxAbs, rel_rms: Math.sqrt(sd / Math.max(sa, 1e-30)),
    top1_agree: agree, top1_total: positions,
  };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [a, b, vocab] = process.argv.slice(2);
  console.log(JSON.stringify(compareLogits(a, b, Number(vocab))));
}
