// jobs.mjs - the computations the browser test runs, the same code in Chromium (page.mjs) and in
// Node (browser_test.mjs), on the transformers.js module each gives. It imports nothing: a job and
// its result are plain JSON (numbers, not BigInts or typed arrays), so they cross the DevTools
// protocol unchanged.
//
//   await runJob(tjs, job)  job.kind is one of
//     generate  { model, ids, max_new_tokens, prefill }: AutoModelForCausalLM, greedy generate from
//               ids with no end-of-sequence stop, and one forward of the model on prefill's
//               { input_ids, attention_mask } (each { data, dims }) -> { tokens, logits }
//     encode    { model, auto_class, feeds: { name: { data, dims } }, outputs } -> { outputs:
//               { name: { data, dims } } }
//     pipeline  { model, task, text, options } -> { ids, output } (the tokenizer's ids of the text
//               and the pipeline's output; a tensor output as { data, dims })
// `model` is a folder name under env.localModelPath; models load from local files only.

const plainTensor = (t) => ({ dims: Array.from(t.dims), data: Array.from(t.data, Number) });
const int64 = (tjs, data, dims) => new tjs.Tensor('int64', BigInt64Array.from(data, (v) => BigInt(v)), dims);

export async function runJob(tjs, job) {
  const opts = { local_files_only: true };
  if (job.kind === 'generate') {
    const model = await tjs.AutoModelForCausalLM.from_pretrained(job.model, opts);
    try {
      const n = job.ids.length;
      const input_ids = int64(tjs, job.ids, [1, n]);
      const attention_mask = int64(tjs, new Array(n).fill(1), [1, n]);
      const out = await model.generate({
        input_ids, attention_mask, max_new_tokens: job.max_new_tokens, do_sample: false,
        eos_token_id: -1,  // no id: nothing stops the loop early
      });
      const tokens = out.tolist()[0].slice(n).map(Number);
      const { logits } = await model({
        input_ids: int64(tjs, job.prefill.input_ids.data, job.prefill.input_ids.dims),
        attention_mask: int64(tjs, job.prefill.attention_mask.data, job.prefill.attention_mask.dims),
      });
      return { tokens, logits: plainTensor(logits) };
    } finally {
      await model.dispose();
    }
  }
  if (job.kind === 'encode') {
    const model = await tjs[job.auto_class].from_pretrained(job.model, { ...opts, dtype: job.dtype });
    try {
      const feeds = {};
      for (const [name, t] of Object.entries(job.feeds)) feeds[name] = int64(tjs, t.data, t.dims);
      const result = await model(feeds);
      const outputs = {};
      for (const name of job.outputs) if (result[name]) outputs[name] = plainTensor(result[name]);
      return { outputs, gave: Object.keys(result) };
    } finally {
      await model.dispose();
    }
  }
  if (job.kind === 'pipeline') {
    const pipe = await tjs.pipeline(job.task, job.model, opts);
    try {
      const ids = pipe.tokenizer(job.text).input_ids.tolist()[0].map(Number);
      const output = await pipe(job.text, job.options ?? {});
      return { ids, output: output instanceof tjs.Tensor ? plainTensor(output) : output };
    } finally {
      await pipe.dispose();
    }
  }
  throw new Error(`unknown job kind '${job.kind}'`);
}
