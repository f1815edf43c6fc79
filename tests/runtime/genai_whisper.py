"""genai_whisper.py - ONNX Runtime GenAI runs mobius's default Whisper folder.

    python genai_whisper.py MOBIUS_CLI WORK_DIR [--dtype f32|f16]

Writes a Whisper checkpoint of random weights (numpy, seeded) with the frame count GenAI's
Whisper runner feeds (3000 frames: max_source_positions 1500) and small other sizes (d_model 64,
2 + 2 layers, 8 encoder and 4 decoder heads, vocab 300), builds it with `mobius build` and no --runtime (GenAI's layout),
then generates greedily from random log-mel features and a 4-token decoder prompt with GenAI's own
generator (og.Generator, audio_features through set_inputs) and with a plain ONNX Runtime loop
over the folder's two graphs (the encoder once, the decoder with its self cache growing and the
encoder's cross keys and values as inputs). Passes when GenAI's tokens equal the loop's, the run
generated past the prompt, and the folder has genai_config.json of type whisper and
audio_processor_config.json. Exit status 0 pass, 1 fail.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import onnxruntime_genai as og

D, LAYERS, HEADS, FFN, VOCAB, MELS, SOURCE, TARGET = 64, 2, 4, 96, 300, 80, 1500, 64
ENCODER_HEADS = 8  # head sizes of their own per side: 8 of 8 in the encoder, 4 of 16 in the decoder
EOS, START = 257, 258
PROMPT = [START, 259, 260, 261]


def tensors(rng):
    t = {}
    w = lambda *shape: (rng.standard_normal(shape) * 0.2).astype(np.float32)
    ones = lambda n: (1.0 + rng.standard_normal(n) * 0.05).astype(np.float32)
    t["model.encoder.conv1.weight"], t["model.encoder.conv1.bias"] = w(D, MELS, 3), w(D)
    t["model.encoder.conv2.weight"], t["model.encoder.conv2.bias"] = w(D, D, 3), w(D)
    pos = np.arange(SOURCE)[:, None] * np.exp(-np.log(10000) / (D // 2 - 1) * np.arange(D // 2))[None, :]
    t["model.encoder.embed_positions.weight"] = np.concatenate([np.sin(pos), np.cos(pos)], 1).astype(np.float32)
    t["model.decoder.embed_tokens.weight"] = w(VOCAB, D) * 10
    t["model.decoder.embed_positions.weight"] = w(TARGET, D)

    def attention(p, cross=False):
        for n in ("q", "k", "v", "out"):
            t[f"{p}.{n}_proj.weight"] = w(D, D)
            if n != "k":
                t[f"{p}.{n}_proj.bias"] = w(D)

    def norm(p):
        t[p + ".weight"], t[p + ".bias"] = ones(D), w(D)

    for side in ("encoder", "decoder"):
        for i in range(LAYERS):
            p = f"model.{side}.layers.{i}"
            attention(p + ".self_attn")
            norm(p + ".self_attn_layer_norm")
            if side == "decoder":
                attention(p + ".encoder_attn")
                norm(p + ".encoder_attn_layer_norm")
            t[p + ".fc1.weight"], t[p + ".fc1.bias"] = w(FFN, D), w(FFN)
            t[p + ".fc2.weight"], t[p + ".fc2.bias"] = w(D, FFN), w(D)
            norm(p + ".final_layer_norm")
        norm(f"model.{side}.layer_norm")
    return t


def save_safetensors(path, t):
    header, offset, blobs = {}, 0, []
    for name in sorted(t):
        b = np.ascontiguousarray(t[name]).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t[name].shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def checkpoint(folder):
    os.makedirs(folder, exist_ok=True)
    save_safetensors(os.path.join(folder, "model.safetensors"), tensors(np.random.default_rng(7)))
    config = {"architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper", "d_model": D,
              "encoder_layers": LAYERS, "decoder_layers": LAYERS, "encoder_attention_heads": ENCODER_HEADS,
              "decoder_attention_heads": HEADS, "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN,
              "activation_function": "gelu", "num_mel_bins": MELS, "max_source_positions": SOURCE,
              "max_target_positions": TARGET, "vocab_size": VOCAB, "pad_token_id": EOS, "bos_token_id": EOS,
              "eos_token_id": EOS, "decoder_start_token_id": START, "scale_embedding": False,
              "tie_word_embeddings": True, "is_encoder_decoder": True}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def ort_loop(folder, feats, steps):
    enc = ort.InferenceSession(os.path.join(folder, "encoder_model.onnx"))
    dec = ort.InferenceSession(os.path.join(folder, "decoder_model_merged.onnx"))
    e = dict(zip([o.name for o in enc.get_outputs()], enc.run(None, {"audio_features": feats})))
    dtype = e["present_key_cross_0"].dtype
    past = {}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            past[f"past_{kv}_self_{i}"] = np.zeros((1, HEADS, 0, D // HEADS), dtype)
            past[f"past_{kv}_cross_{i}"] = e[f"present_{kv}_cross_{i}"]
    ids, toks = np.array([PROMPT], np.int64), list(PROMPT)
    while len(toks) < len(PROMPT) + steps:
        r = dict(zip([o.name for o in dec.get_outputs()], dec.run(None, {"input_ids": ids, **past})))
        tok = int(r["logits"][0, -1].astype(np.float32).argmax())
        toks.append(tok)
        if tok == EOS:
            break
        for i in range(LAYERS):
            for kv in ("key", "value"):
                past[f"past_{kv}_self_{i}"] = r[f"present_{kv}_self_{i}"]
        ids = np.array([[tok]], np.int64)
    return toks


def genai(folder, feats, steps):
    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(PROMPT) + steps, do_sample=False)
    gen = og.Generator(model, params)
    inputs = og.NamedTensors()
    inputs["audio_features"] = feats
    inputs["input_ids"] = np.array([PROMPT], np.int32)  # GenAI reads these as int32
    gen.set_inputs(inputs)
    while not gen.is_done():
        gen.generate_next_token()
    return [int(t) for t in gen.get_sequence(0)]


def main():
    cli, work = sys.argv[1], sys.argv[2]
    dtype = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--dtype" else "f32"
    ckpt, out = os.path.join(work, "whisper-ckpt"), os.path.join(work, "whisper-" + dtype)
    checkpoint(ckpt)
    r = subprocess.run([cli, "build", "--model", ckpt, out, "--dtype", dtype], capture_output=True, text=True)
    print(r.stdout + r.stderr, end="")
    if r.returncode != 0:
        print("FAIL: mobius build exited with", r.returncode)
        return 1
    with open(os.path.join(out, "genai_config.json")) as f:
        cfg = json.load(f)
    if cfg["model"]["type"] != "whisper" or not os.path.exists(os.path.join(out, "audio_processor_config.json")):
        print("FAIL: the default folder is not laid out for GenAI's Whisper runner")
        return 1
    # features in the encoder's dtype, as GenAI's processor makes them
    feats = (np.random.default_rng(3).standard_normal((1, MELS, 2 * SOURCE)) * 0.5).astype(
        np.float16 if dtype == "f16" else np.float32)
    steps = 12
    a, b = genai(out, feats, steps), ort_loop(out, feats, steps)
    print("genai:", a)
    print("ort:  ", b)
    if a != b or len(a) <= len(PROMPT):
        print("FAIL: GenAI's tokens differ from the ONNX Runtime loop's")
        return 1
    print("PASS: GenAI generated", len(a) - len(PROMPT), "tokens, equal to the ONNX Runtime loop's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
