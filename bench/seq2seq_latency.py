#!/usr/bin/env python3
"""seq2seq_latency.py - two encoder-decoder ONNX folders (encoder_model.onnx and
decoder_model_merged.onnx, Optimum's layout and I/O) in ONNX Runtime on the CPU, timed paired in one
process, for bench/seq2seq.sh. This is how a user of Optimum's ORTModelForSeq2SeqLM /
ORTModelForSpeechSeq2Seq runs such a folder: the onnxruntime Python package, CPU provider.

    python seq2seq_latency.py [--names A_NAME,B_NAME] [--contexts 32,256] [--steps 32]
                              [--enc-reps 10] [--rounds 2] [--threads 2] [--max-other 0.05]
                              [--retries 2] [--quiet-wait 600] [--label L] [--out FILE] A_DIR B_DIR
    python seq2seq_latency.py --genai [--steps 32] [same options] A_DIR [B_DIR]

The graphs' contract (Optimum's export, text2text-generation-with-past and
automatic-speech-recognition-with-past):
  encoder  input_ids + attention_mask [batch, source] (Whisper: input_features [batch, 80, 3000])
           -> last_hidden_state
  decoder  input_ids, encoder_attention_mask (text models), encoder_hidden_states,
           past_key_values.{i}.decoder.key/value, past_key_values.{i}.encoder.key/value,
           use_cache_branch (bool [1]) -> logits, present.{i}.decoder.key/value,
           present.{i}.encoder.key/value; caches [batch, heads, length, head_dim]
The encoder input is batch 1: 128 source token ids (attention mask all ones), or for Whisper
[1, 80, 3000] features drawn uniformly from [-1, 1); the same values for both folders.

Measured in each round, the two models' sessions created in alternating order (A then B in even
rounds, B then A in odd ones), each session with THREADS intra-op threads, one inter-op thread,
sequential execution, all graph optimizations, and the intra-op pool not spinning (two sessions
share the cores):
  create     the seconds to create the encoder and decoder sessions (once per round; before the
             first round each model's sessions are created once, untimed, as the process's first
             session pays ONNX Runtime's start-up)
  agreement  each model's encoder on the same input; max |diff| of last_hidden_state. Then each
             decoder's first step on its own encoder's output (the decoder start token, no cache,
             use_cache_branch false): max |diff| of the logits, beside the largest |logit|
  encoder    --enc-reps runs of each encoder, interleaved (A B, then B A, ...)
  decoder    per context P in --contexts: each model prefills P decoder tokens (the start token and
             P - 1 fixed ids, no cache, untimed), which gives its self-attention cache of P and its
             cross-attention cache (present.{i}.encoder.*, from its encoder's output); then
             2 + --steps single-token steps (use_cache_branch true, the cross cache fed back
             unchanged, the self cache growing by one each step), A's and B's steps interleaved
             (A B, then B A, ...), the first two untimed. Step outputs are bound (IOBinding) to
             preallocated buffers, two per self-cache input, alternating, so a step's time is the
             graph's, not an allocation or a copy of the cache (a cached step's
             present.{i}.encoder.* outputs, not used, are left to ORT to allocate, as it does
             when a caller does not bind them). Each step's logits are compared between
             A and B (max |diff| over the steps is reported), so a graph that is wrong cannot look
             fast.
A metric's time is the median of its measurements in a round, its ratio A/B the median of the ratios
of neighbouring measurements (the runs or steps of A and B next to each other); over the rounds,
times are medians and ratios geometric means. Before each round the script waits up to --quiet-wait
seconds for a 2-second window in which the machine is busy under --max-other; a round during which
other processes took more than --max-other of the CPU is run again (up to --retries times), the
least contended kept.
Prints a markdown table (metric, A ms, B ms, A / B) and the agreement, and with --out the figures
as JSON.

--genai: ONNX Runtime GenAI's generator (og.Model, og.Generator, greedy; min_length = max_length so
no end-of-text token stops it) on one or two Whisper folders of GenAI's layout (genai_config.json of
type whisper), with the python of a venv holding onnxruntime-genai. Both models' sessions get THREADS
intra-op threads, one inter-op thread and, as above, intra-op pools that do not spin (a session
config entry in genai_config.json's session_options, overlaid): with GenAI's default, spinning, the
threads of the model that ran last take the cores from the other for tens of milliseconds, so a
token after a switch of model is twice as slow. Per prompt length P in --contexts, a generator per
model (made in the models' load order) gets the same [1, 80, 3000] features as above (set_inputs,
under the encoder input genai_config.json names, audio_features by default) and the decoder prompt
<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|> and P - 4 fixed ids (append_tokens:
the encoder, then the decoder over the prompt; timed once), one untimed token, then 2 + --steps
tokens with generate_next_token(), the two models' tokens interleaved (A B, then B A, ...), the
first two untimed. Reported: the median ms per token (and tokens/s), the ratio A/B as the median
of the ratios of neighbouring tokens, how many generated tokens the two agree on, og.Model's load
seconds. Rounds as above. A folder without genai_config.json, of another type, or that GenAI fails
to load is reported ("skipped: the reason") and not measured; with two folders, a second that
fails leaves the first measured alone.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

ort = None  # onnxruntime, imported by the ONNX Runtime mode only (--genai runs in a venv of its own)


def cpu_jiffies():
    """Busy and total CPU time of the machine, and this process's."""
    with open("/proc/stat") as f:
        all_ = [int(x) for x in f.readline().split()[1:]]
    total = sum(all_)
    t = os.times()
    return total - all_[3] - (all_[4] if len(all_) > 4 else 0), total, round((t.user + t.system) * os.sysconf("SC_CLK_TCK"))


def other_share(a, b) -> float:
    return max(0, (b[0] - a[0]) - (b[2] - a[2])) / max(1, b[1] - a[1])


def wait_quiet(max_other: float, quiet_wait: float) -> None:
    until = time.monotonic() + quiet_wait
    said = False
    while True:
        a = cpu_jiffies()
        time.sleep(2)
        b = cpu_jiffies()
        share = (b[0] - a[0]) / max(1, b[1] - a[1])
        if share <= max_other or time.monotonic() > until:
            return
        if not said:
            print(f"seq2seq_latency.py: the machine is busy ({100 * share:.0f}% CPU), waiting", file=sys.stderr)
            said = True
        time.sleep(3)


def session_options(threads: int):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    o.log_severity_level = 3
    return o


def find_graph(folder: str, name: str) -> str:
    for p in (os.path.join(folder, name), os.path.join(folder, "onnx", name)):
        if os.path.isfile(p):
            return p
    sys.exit(f"seq2seq_latency.py: {folder} has no {name} (nor onnx/{name})")


def decoder_start(folder: str, default: int) -> int:
    try:
        with open(os.path.join(folder, "config.json")) as f:
            v = json.load(f).get("decoder_start_token_id")
        return default if v is None else int(v)
    except OSError:
        return default


class Model:
    """One folder's two sessions and how to feed them."""

    def __init__(self, folder: str, threads: int):
        self.folder = folder
        opts = session_options(threads)
        t = time.perf_counter()
        self.enc = ort.InferenceSession(find_graph(folder, "encoder_model.onnx"), opts, providers=["CPUExecutionProvider"])
        self.dec = ort.InferenceSession(find_graph(folder, "decoder_model_merged.onnx"), opts,
                                        providers=["CPUExecutionProvider"])
        self.create_s = time.perf_counter() - t
        self.enc_inputs = [i.name for i in self.enc.get_inputs()]
        self.dec_inputs = {i.name: i for i in self.dec.get_inputs()}
        self.dec_outputs = [o.name for o in self.dec.get_outputs()]
        self.self_past = [n for n in self.dec_inputs if n.startswith("past_key_values.") and ".decoder." in n]
        self.cross_past = [n for n in self.dec_inputs if n.startswith("past_key_values.") and ".encoder." in n]
        known = {"input_ids", "encoder_attention_mask", "encoder_hidden_states", "use_cache_branch"}
        for n in self.dec_inputs:
            if n not in known and n not in self.self_past and n not in self.cross_past:
                sys.exit(f"seq2seq_latency.py: {folder}: decoder input {n} is not one this benchmark feeds")
        for n in self.self_past + self.cross_past:
            if present(n) not in self.dec_outputs:
                sys.exit(f"seq2seq_latency.py: {folder}: decoder input {n} has no output {present(n)}")
        if "logits" not in self.dec_outputs or not self.self_past:
            sys.exit(f"seq2seq_latency.py: {folder}: the decoder has no logits or no past_key_values inputs")
        self.io = self.dec.io_binding()

    def encode(self, feeds):
        return self.enc.run(["last_hidden_state"], {n: feeds[n] for n in self.enc_inputs})[0]

    def decoder_feeds(self, ids, hidden, enc_mask, cache, use_cache: bool):
        """Feeds for session.run: ids [1, S]; cache None (empty past, no-cache branch) or a dict."""
        f = {}
        for n, meta in self.dec_inputs.items():
            if n == "input_ids":
                f[n] = ids
            elif n == "encoder_attention_mask":
                f[n] = enc_mask
            elif n == "encoder_hidden_states":
                f[n] = hidden
            elif n == "use_cache_branch":
                f[n] = np.array([use_cache])
            elif cache is not None:
                f[n] = cache[n]
            else:
                heads, head_dim = meta.shape[1], meta.shape[3]
                if not isinstance(heads, int) or not isinstance(head_dim, int):
                    sys.exit(f"seq2seq_latency.py: {self.folder}: {n} has no static heads / head_dim {meta.shape}")
                f[n] = np.zeros((1, heads, 0, head_dim), dtype=np.float32)
        return f

    def first_step(self, start: int, hidden, enc_mask):
        ids = np.array([[start]], dtype=np.int64)
        return self.dec.run(["logits"], self.decoder_feeds(ids, hidden, enc_mask, None, False))[0]

    def stepper(self, prompt_ids, hidden, enc_mask, n_steps: int):
        """Prefills prompt_ids (no cache, untimed); returns step(id) -> ms, and .logits."""
        P = prompt_ids.shape[1]
        names = self.self_past + self.cross_past
        out = self.dec.run(["logits"] + [present(n) for n in names],
                           self.decoder_feeds(prompt_ids, hidden, enc_mask, None, False))
        pres = dict(zip(names, out[1:]))
        cross = {n: np.ascontiguousarray(pres[n]) for n in self.cross_past}
        total = P + n_steps + 1
        bufs, dims = {}, {}
        for n in self.self_past:
            x = pres[n]
            if x.ndim != 4 or x.shape[2] != P:
                sys.exit(f"seq2seq_latency.py: {self.folder}: {present(n)} after {P} tokens is {x.shape}, "
                         "not [1, heads, P, head_dim]")
            dims[n] = (x.shape[1], x.shape[3])
            per = x.shape[1] * x.shape[3]
            bufs[n] = [np.empty(per * total, dtype=x.dtype), np.empty(per * total, dtype=x.dtype)]
            bufs[n][0][: x.size] = x.reshape(-1)  # once, untimed
        vocab = out[0].shape[-1]
        logits = np.empty((1, 1, vocab), dtype=np.float32)
        ids = np.zeros((1, 1), dtype=np.int64)
        flag = np.array([True])
        io = self.io
        state = {"past": P, "s": 0}

        def view(n, k, length):
            h, d = dims[n]
            return bufs[n][k][: h * length * d].reshape(1, h, length, d)

        def step(token: int) -> float:
            past, s = state["past"], state["s"]
            ids[0, 0] = token
            io.clear_binding_inputs()
            io.clear_binding_outputs()
            for n in self.dec_inputs:
                if n == "input_ids":
                    io.bind_cpu_input(n, ids)
                elif n == "encoder_attention_mask":
                    io.bind_cpu_input(n, enc_mask)
                elif n == "encoder_hidden_states":
                    io.bind_cpu_input(n, hidden)
                elif n == "use_cache_branch":
                    io.bind_cpu_input(n, flag)
                elif n in cross:
                    io.bind_cpu_input(n, cross[n])
                else:
                    io.bind_cpu_input(n, view(n, s % 2, past))
            io.bind_output("logits", "cpu", 0, np.float32, logits.shape, logits.ctypes.data)
            for n in self.self_past:
                v = view(n, (s + 1) % 2, past + 1)
                io.bind_output(present(n), "cpu", 0, v.dtype, v.shape, v.ctypes.data)
            for n in self.cross_past:
                io.bind_output(present(n), "cpu")
            t = time.perf_counter()
            self.dec.run_with_iobinding(io)
            ms = (time.perf_counter() - t) * 1000
            state["past"], state["s"] = past + 1, s + 1
            return ms

        step.logits = logits
        return step


def present(past_name: str) -> str:
    return "present." + past_name[len("past_key_values."):]


def lcg_tokens(n: int, lo: int, hi: int, seed: int) -> list:
    """Deterministic ids in [lo, hi): the same LCG as bench/decode.mjs."""
    out, s = [], (seed * 6364136223846793005 + 1442695040888963407) % 2**64
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(lo + (s >> 33) % (hi - lo))
    return out


def one_round(a_dir, b_dir, swapped, args):
    """One round; returns its figures (A/B in the argument order, whatever the creation order)."""
    cpu0 = cpu_jiffies()
    # A list, not a map by folder: A and B may be the same folder (a check of the method).
    if swapped:
        B = Model(b_dir, args.threads)
        A = Model(a_dir, args.threads)
    else:
        A = Model(a_dir, args.threads)
        B = Model(b_dir, args.threads)
    res = {"swapped": swapped, "create_a_s": A.create_s, "create_b_s": B.create_s}

    # Inputs: the same for both. The kind from A's encoder inputs.
    whisper = "input_features" in A.enc_inputs
    if whisper != ("input_features" in B.enc_inputs):
        sys.exit("seq2seq_latency.py: one encoder takes input_features, the other not")
    rng = np.random.default_rng(0)
    if whisper:
        feeds = {"input_features": rng.uniform(-1, 1, size=(1, 80, 3000)).astype(np.float32)}
        res["encoder_input"] = "1 x 80 x 3000 features"
        start_default, text_hi = 50258, 50257
    else:
        n = args.source
        ids = np.array([lcg_tokens(n, 3, 32000, 3)], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        res["encoder_input"] = f"1 x {n} tokens"
        start_default, text_hi = 0, 32000
    start = decoder_start(a_dir, start_default)

    # Agreement, and the warm-up.
    ha, hb = A.encode(feeds), B.encode(feeds)
    if ha.shape != hb.shape:
        sys.exit(f"seq2seq_latency.py: the encoders' outputs differ in shape: {ha.shape}, {hb.shape}")
    res["encoder_diff"] = float(np.max(np.abs(ha - hb)))
    enc_mask = np.ones((1, ha.shape[1]), dtype=np.int64)
    la, lb = A.first_step(start, ha, enc_mask), B.first_step(start, hb, enc_mask)
    if la.shape != lb.shape:
        sys.exit(f"seq2seq_latency.py: the decoders' logits differ in shape: {la.shape}, {lb.shape}")
    res["first_step_diff"] = float(np.max(np.abs(la - lb)))
    res["first_step_max_logit"] = float(np.max(np.abs(lb)))

    # The encoder, interleaved.
    ta, tb, ratios = [], [], []
    for r in range(args.enc_reps):
        t = {}
        for m in ((A, B) if r % 2 == 0 else (B, A)):
            t0 = time.perf_counter()
            m.encode(feeds)
            t[m] = (time.perf_counter() - t0) * 1000
        ta.append(t[A])
        tb.append(t[B])
        ratios.append(t[A] / t[B])
    res["encoder"] = {"a_ms": statistics.median(ta), "b_ms": statistics.median(tb), "ratio": statistics.median(ratios)}

    # The decoder at each self-cache length.
    res["decoder"] = []
    sa = sb = None
    for P in args.contexts:
        prompt = np.array([[start] + lcg_tokens(P - 1, 3, text_hi, 1)], dtype=np.int64)
        steps = lcg_tokens(args.steps + 2, 3, text_hi, 2)
        # the caches' buffers allocated in the sessions' order too: what is allocated first runs slower
        if swapped:
            sb = B.stepper(prompt, hb, enc_mask, len(steps))
            sa = A.stepper(prompt, ha, enc_mask, len(steps))
        else:
            sa = A.stepper(prompt, ha, enc_mask, len(steps))
            sb = B.stepper(prompt, hb, enc_mask, len(steps))
        ta, tb, ratios, diff = [], [], [], 0.0
        for s, tok in enumerate(steps):
            if s % 2 == 0:
                a = sa(tok)
                b = sb(tok)
            else:
                b = sb(tok)
                a = sa(tok)
            diff = max(diff, float(np.max(np.abs(sa.logits - sb.logits))))
            if s < 2:
                continue  # the first cached step and one warm-up
            ta.append(a)
            tb.append(b)
            ratios.append(a / b)
        res["decoder"].append({"past": P, "a_ms": statistics.median(ta), "b_ms": statistics.median(tb),
                               "ratio": statistics.median(ratios), "a_min_ms": min(ta), "b_min_ms": min(tb),
                               "logits_diff": diff})
    del A, B, sa, sb
    res["other_cpu"] = other_share(cpu0, cpu_jiffies())
    return res


def run_rounds(fn, args, summary):
    """fn(swapped) for 2 * ceil(--rounds / 2) rounds, alternating which model comes first; each
    after a quiet window, repeated when other processes took more than --max-other of the CPU."""
    rounds = []
    for r in range(2 * math.ceil(args.rounds / 2)):
        best = None
        for attempt in range(args.retries + 1):
            wait_quiet(args.max_other, args.quiet_wait)
            x = fn(r % 2 == 1)
            if best is None or x["other_cpu"] < best["other_cpu"]:
                best = x
            if x["other_cpu"] <= args.max_other:
                break
            print(f"seq2seq_latency.py: other processes took {100 * x['other_cpu']:.0f}% of the CPU during round {r}"
                  + (", measuring again" if attempt < args.retries else ", keeping the least contended"),
                  file=sys.stderr)
        rounds.append(best)
        print(f"seq2seq_latency.py: round {r} done: {summary(best)}", file=sys.stderr)
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b", nargs="?", default="")
    ap.add_argument("--genai", action="store_true")
    ap.add_argument("--names", default="A,B")
    ap.add_argument("--label", default="")
    ap.add_argument("--contexts", default="32,256")
    ap.add_argument("--source", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--enc-reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-other", type=float, default=0.05)
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--quiet-wait", type=float, default=600)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    args.contexts = [int(x) for x in args.contexts.split(",") if x]
    if args.genai:
        genai_main(args)
    else:
        if not args.b:
            sys.exit("seq2seq_latency.py: two folders, A and B")
        ort_main(args)


def ort_main(args) -> None:
    global ort
    import onnxruntime

    ort = onnxruntime
    name_a, name_b = args.names.split(",")
    a_dir, b_dir = os.path.abspath(args.a), os.path.abspath(args.b)
    # The process's first session pays ONNX Runtime's start-up: one untimed creation of each first.
    for d in (a_dir, b_dir):
        Model(d, args.threads)

    rounds = run_rounds(lambda swapped: one_round(a_dir, b_dir, swapped, args), args,
                        lambda x: f"encoder {x['encoder']['ratio']:.3f}, decoder "
                        + ", ".join(f"{d['past']}: {d['ratio']:.3f}" for d in x["decoder"]))
    med = lambda xs: statistics.median(xs)
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    res = {
        "a": a_dir, "b": b_dir, "names": [name_a, name_b], "label": args.label, "threads": args.threads,
        "onnxruntime": ort.__version__, "rounds": len(rounds), "encoder_input": rounds[0]["encoder_input"],
        "create_a_s": med([x["create_a_s"] for x in rounds]), "create_b_s": med([x["create_b_s"] for x in rounds]),
        "create_ratio": geo([x["create_a_s"] / x["create_b_s"] for x in rounds]),
        "encoder": {
            "a_ms": med([x["encoder"]["a_ms"] for x in rounds]), "b_ms": med([x["encoder"]["b_ms"] for x in rounds]),
            "ratio": geo([x["encoder"]["ratio"] for x in rounds]),
            "ratio_each": [x["encoder"]["ratio"] for x in rounds]},
        "decoder": [{
            "past": d["past"],
            "a_ms": med([x["decoder"][k]["a_ms"] for x in rounds]),
            "b_ms": med([x["decoder"][k]["b_ms"] for x in rounds]),
            "ratio": geo([x["decoder"][k]["ratio"] for x in rounds]),
            "ratio_each": [x["decoder"][k]["ratio"] for x in rounds],
            "logits_diff": max(x["decoder"][k]["logits_diff"] for x in rounds),
        } for k, d in enumerate(rounds[0]["decoder"])],
        "encoder_diff": max(x["encoder_diff"] for x in rounds),
        "first_step_diff": max(x["first_step_diff"] for x in rounds),
        "first_step_max_logit": rounds[0]["first_step_max_logit"],
        "other_cpu": max(x["other_cpu"] for x in rounds),
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")

    e = res["encoder"]
    print(f"| {args.label} | {name_a} ms | {name_b} ms | {name_a} / {name_b} |")
    print("|---|---|---|---|")
    print(f"| encoder, batch {res['encoder_input']} | {e['a_ms']:.1f} | {e['b_ms']:.1f} | {e['ratio']:.3f} |")
    for d in res["decoder"]:
        print(f"| decoder ms/token, self cache {d['past']} | {d['a_ms']:.2f} | {d['b_ms']:.2f} | {d['ratio']:.3f} |")
    print(f"| session creation (encoder + decoder), s | {res['create_a_s']:.2f} | {res['create_b_s']:.2f} "
          f"| {res['create_ratio']:.3f} |")
    print()
    print(f"Agreement: encoder output max |diff| {res['encoder_diff']:.2e}; first decoder step logits max |diff| "
          f"{res['first_step_diff']:.2e} (largest |logit| {res['first_step_max_logit']:.2f}); cached steps' logits "
          + ", ".join(f"{d['logits_diff']:.2e} (cache {d['past']})" for d in res["decoder"]) + ".")
    print(f"ONNX Runtime {res['onnxruntime']} (Python), CPU, {args.threads} intra-op threads; {len(rounds)} rounds "
          f"alternating which model is created first, {args.enc_reps} encoder runs and {args.steps} timed decoder "
          f"steps each; other processes took at most {100 * res['other_cpu']:.0f}% of the CPU during a round.")


# ---------------------------------------------------------------------------------------------
# --genai: ONNX Runtime GenAI's own generator on Whisper folders of its layout (genai_config.json
# of type whisper), run with the python of a venv holding onnxruntime-genai.

# Whisper's decoder prompt in the multilingual vocabulary (51865 ids): <|startoftranscript|> <|en|>
# <|transcribe|> <|notimestamps|>.
WHISPER_PROMPT = [50258, 50259, 50359, 50363]


class Skip(Exception):
    """A folder GenAI cannot run: the reason is printed and the measurement skipped."""


def genai_load(og, folder: str, threads: int):
    path = os.path.join(folder, "genai_config.json")
    if not os.path.isfile(path):
        raise Skip(f"{folder} has no genai_config.json")
    with open(path) as f:
        m = json.load(f).get("model", {})
    if m.get("type") != "whisper":
        raise Skip(f"{path} is of model type {m.get('type')!r}, not whisper")
    if m.get("vocab_size") != 51865:
        raise Skip(f"{path}: vocab_size {m.get('vocab_size')}, not the multilingual 51865 the prompt ids are for")
    # string keys other than GenAI's own are passed to ONNX Runtime as session config entries
    opts = {"intra_op_num_threads": threads, "inter_op_num_threads": 1, "session.intra_op.allow_spinning": "0"}
    overlay = {"model": {k: {"session_options": opts} for k in ("encoder", "decoder") if k in m}}
    try:
        config = og.Config(folder)
        config.overlay(json.dumps(overlay))
        t = time.perf_counter()
        model = og.Model(config)
    except Exception as e:  # GenAI's own error: the reason to print
        raise Skip(f"GenAI cannot load {folder}: {e}") from e
    # the encoder's graph input of the features (GenAI's default name unless the config names another)
    feature_input = m.get("encoder", {}).get("inputs", {}).get("audio_features", "audio_features")
    return model, time.perf_counter() - t, m.get("context_length", 448), feature_input


def genai_round(og, dirs, swapped, features, args):
    cpu0 = cpu_jiffies()
    n = len(dirs)
    loaded = [None] * n
    for i in (reversed(range(n)) if swapped else range(n)):
        loaded[i] = genai_load(og, dirs[i], args.threads)
    models = [x[0] for x in loaded]
    res = {"swapped": swapped, "load_s": [x[1] for x in loaded], "contexts": []}
    for P in args.contexts:
        ctx = min(x[2] for x in loaded)
        if P + args.steps + 3 > ctx:
            sys.exit(f"seq2seq_latency.py: self cache {P} + {args.steps + 3} tokens is longer than the context {ctx}")
        prompt = np.array([WHISPER_PROMPT + lcg_tokens(P - len(WHISPER_PROMPT), 3, 50257, 1)], dtype=np.int32)
        max_len = P + args.steps + 3
        # the generators (their caches) made in the models' load order: the first runs slower
        gens, prompt_ms = [None] * n, [None] * n
        for i in (reversed(range(n)) if swapped else range(n)):
            m, x = models[i], loaded[i]
            params = og.GeneratorParams(m)
            # min_length = max_length: no end-of-text token stops a run early
            params.set_search_options(max_length=max_len, min_length=max_len, do_sample=False)
            g = og.Generator(m, params)
            inputs = og.NamedTensors()
            inputs[x[3]] = features
            g.set_inputs(inputs)
            t = time.perf_counter()
            g.append_tokens(prompt)  # the encoder, then the decoder over the prompt
            prompt_ms[i] = (time.perf_counter() - t) * 1000
            g.generate_next_token()  # one warm-up, untimed
            gens[i] = g
        # the models' tokens interleaved (A B, then B A, ...), the first two untimed
        times = [[] for _ in models]
        ratios = []
        for k in range(args.steps + 2):
            t_step = [0.0] * n
            for i in (range(n) if k % 2 == 0 else reversed(range(n))):
                t = time.perf_counter()
                gens[i].generate_next_token()
                t_step[i] = (time.perf_counter() - t) * 1000
            if k < 2:
                continue
            for i in range(n):
                times[i].append(t_step[i])
            if n == 2:
                ratios.append(t_step[0] / t_step[1])
        seqs = [[int(x) for x in g.get_sequence(0)][P:] for g in gens]
        c = {"past": P, "ms": [statistics.median(t) for t in times], "prompt_ms": prompt_ms, "tokens": len(seqs[0])}
        if n == 2:
            c["ratio"] = statistics.median(ratios)
            c["agree"] = sum(x == y for x, y in zip(*seqs))
        res["contexts"].append(c)
        del gens
    del models, loaded
    res["other_cpu"] = other_share(cpu0, cpu_jiffies())
    return res


def genai_main(args) -> None:
    import onnxruntime_genai as og

    names = args.names.split(",")
    dirs = [os.path.abspath(args.a)] + ([os.path.abspath(args.b)] if args.b else [])
    features = np.random.default_rng(0).uniform(-1, 1, size=(1, 80, 3000)).astype(np.float32)
    # A folder that GenAI cannot load: the first one's reason ends the measurement, the second's
    # leaves the first measured alone.
    try:
        genai_load(og, dirs[0], args.threads)
    except Skip as e:
        print(f"ONNX Runtime GenAI generator ({names[0]}): skipped: {e}")
        return
    if len(dirs) == 2:
        try:
            genai_load(og, dirs[1], args.threads)
        except Skip as e:
            print(f"ONNX Runtime GenAI generator: {names[1]} left out: {e}")
            dirs = dirs[:1]
    n = len(dirs)
    try:
        rounds = run_rounds(lambda swapped: genai_round(og, dirs, swapped, features, args), args,
                            lambda x: ", ".join(f"{c['past']}: " + (f"{c['ratio']:.3f}" if n == 2 else f"{c['ms'][0]:.2f} ms")
                                                for c in x["contexts"]))
    except Skip as e:
        print(f"ONNX Runtime GenAI generator: skipped: {e}")
        return
    except Exception as e:  # GenAI's error while generating: the reason to print
        print(f"ONNX Runtime GenAI generator: skipped: generation failed: {e}")
        return
    med = statistics.median
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    res = {"dirs": dirs, "names": names[:n], "threads": args.threads, "rounds": len(rounds),
           "onnxruntime_genai": og.__version__, "steps": args.steps,
           "load_s": [med([x["load_s"][i] for x in rounds]) for i in range(n)],
           "contexts": [], "other_cpu": max(x["other_cpu"] for x in rounds)}
    for k, c in enumerate(rounds[0]["contexts"]):
        r = {"past": c["past"], "ms": [med([x["contexts"][k]["ms"][i] for x in rounds]) for i in range(n)],
             "prompt_ms": [med([x["contexts"][k]["prompt_ms"][i] for x in rounds]) for i in range(n)]}
        if n == 2:
            r["ratio"] = geo([x["contexts"][k]["ratio"] for x in rounds])
            r["ratio_each"] = [x["contexts"][k]["ratio"] for x in rounds]
            r["agree"] = min(x["contexts"][k]["agree"] for x in rounds)
            r["tokens"] = c["tokens"]
        res["contexts"].append(r)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")

    cols = "".join(f" {x} |" for x in names[:n]) + (f" {names[0]} / {names[1]} |" if n == 2 else "")
    print(f"| {args.label} ONNX Runtime GenAI generator |{cols}")
    print("|---|" + "---|" * (n + (n == 2)))
    fmt = lambda xs, ratio, f: "".join(f" {f(x)} |" for x in xs) + (f" {ratio:.3f} |" if n == 2 else "")
    for r in res["contexts"]:
        print(f"| ms/token (tokens/s), self cache {r['past']} |"
              + fmt(r["ms"], r.get("ratio", 0), lambda x: f"{x:.2f} ({1000 / x:.0f})"))
    for r in res["contexts"]:
        print(f"| audio_features + {r['past']}-token prompt (append_tokens: encoder, prefill), ms |"
              + fmt(r["prompt_ms"], r["prompt_ms"][0] / r["prompt_ms"][-1], lambda x: f"{x:.1f}"))
    print("| og.Model load, s |" + fmt(res["load_s"], res["load_s"][0] / res["load_s"][-1], lambda x: f"{x:.2f}"))
    print()
    if n == 2:
        print("Agreement: greedy tokens the same in both, after the same features and prompt: "
              + ", ".join(f"{r['agree']} of {r['tokens']} (cache {r['past']})" for r in res["contexts"]) + ".")
    print(f"ONNX Runtime GenAI {res['onnxruntime_genai']}, CPU, {args.threads} intra-op threads; {len(rounds)} rounds"
          + (" alternating which model is loaded first" if n == 2 else "")
          + f", {args.steps} timed tokens per self-cache length"
          + (", the two models' tokens interleaved" if n == 2 else "")
          + f", intra-op pools not spinning; other processes took at most {100 * res['other_cpu']:.0f}% of the CPU.")

if __name__ == "__main__":
    main()
