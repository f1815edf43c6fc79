#!/usr/bin/env python3
"""make_seq2seq.py - a randomly initialised encoder-decoder checkpoint of a released model's shape,
saved as transformers saves it (config.json, generation_config.json, model.safetensors, f32), with
small local tokenizer and preprocessor files, for bench/seq2seq.sh.

    python make_seq2seq.py --shape t5|whisper --out DIR [--seed 0]

t5:      t5-small's shape: d_model 512, d_ff 2048, 6 + 6 layers, 8 heads of d_kv 64, vocab 32128,
         ReLU feed-forward, 32 relative-position buckets (max distance 128), tied embeddings
         (T5ForConditionalGeneration, 60.5 M parameters)
whisper: whisper-tiny's shape: d_model 384, 4 + 4 layers, 6 heads, feed-forward 1536, 80 mel bins,
         max_source_positions 1500, max_target_positions 448, vocab 51865
         (WhisperForConditionalGeneration, 37.8 M parameters)

Weights are transformers' own initialisation under torch.manual_seed(SEED). No file comes from the
Hugging Face Hub: the tokenizers are built here (tokenizer.json + tokenizer_config.json, loadable
with AutoTokenizer offline), so Optimum's exporter, which loads a checkpoint's preprocessors to copy
them next to its ONNX files, and mobius, which copies them for the runtimes, find what a released
checkpoint has:
  t5       a word-level tokenizer of 32100 ids (T5's 32000 sentencepiece pieces and 100 sentinels
           <extra_id_N>): <pad> 0, </s> 1, <unk> 2, then t3 ... , split on whitespace
  whisper  a byte-level BPE tokenizer with Whisper's special-token layout: the 256 byte symbols and
           filler words up to id 50256, then <|endoftext|> 50257, <|startoftranscript|> 50258, 99
           language tokens, <|translate|> 50358, <|transcribe|> 50359, <|startoflm|>,
           <|startofprev|>, <|nospeech|>, <|notimestamps|> 50363 and the 1501 timestamps
           <|0.00|> ... <|30.00|> (51865 ids); and preprocessor_config.json, the
           WhisperFeatureExtractor of 80 mel bins, 30 s chunks at 16 kHz (3000 frames)
Needs torch, transformers and tokenizers (bench/peers-optimum-requirements.txt's venv).
"""
import argparse
import json
import os

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import (T5Config, T5ForConditionalGeneration, WhisperConfig, WhisperFeatureExtractor,
                          WhisperForConditionalGeneration)

# Whisper's multilingual language codes, in token order (<|en|> = 50259, ...): 99 of them.
WHISPER_LANGUAGES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr "
    "bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn "
    "yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su"
).split()


def write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def make_t5(out: str) -> None:
    cfg = T5Config(
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8,
        relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.1,
        layer_norm_epsilon=1e-6, feed_forward_proj="relu", tie_word_embeddings=True, is_encoder_decoder=True,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    cfg.architectures = ["T5ForConditionalGeneration"]
    T5ForConditionalGeneration(cfg).eval().save_pretrained(out, safe_serialization=True)

    specials = ["<pad>", "</s>", "<unk>"]
    n_pieces, n_extra = 32000, 100
    vocab = {t: i for i, t in enumerate(specials)}
    vocab.update({f"t{i}": i for i in range(len(specials), n_pieces)})
    extra = [f"<extra_id_{i}>" for i in range(n_extra - 1, -1, -1)]  # <extra_id_0> is the last id, 32099
    vocab.update({t: n_pieces + i for i, t in enumerate(extra)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(specials + extra)
    tok.save(os.path.join(out, "tokenizer.json"))
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "eos_token": "</s>",
        "unk_token": "<unk>", "additional_special_tokens": extra[::-1], "model_max_length": 512,
        "clean_up_tokenization_spaces": False})


def make_whisper(out: str) -> None:
    n_text = 50257  # ids below <|endoftext|>
    eot, sot = 50257, 50258
    langs = [f"<|{c}|>" for c in WHISPER_LANGUAGES]
    tasks = ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
             "<|notimestamps|>"]
    stamps = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    specials = ["<|endoftext|>", "<|startoftranscript|>"] + langs + tasks + stamps
    no_ts = eot + specials.index("<|notimestamps|>")
    lang_ids = {t: sot + 1 + i for i, t in enumerate(langs)}
    vocab_size = n_text + len(specials)
    assert vocab_size == 51865 and no_ts == 50363, (vocab_size, no_ts)

    cfg = WhisperConfig(
        vocab_size=vocab_size, num_mel_bins=80, d_model=384, encoder_layers=4, decoder_layers=4,
        encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536,
        max_source_positions=1500, max_target_positions=448, activation_function="gelu", scale_embedding=False,
        pad_token_id=eot, bos_token_id=eot, eos_token_id=eot, decoder_start_token_id=sot,
        tie_word_embeddings=True)
    cfg.architectures = ["WhisperForConditionalGeneration"]
    model = WhisperForConditionalGeneration(cfg).eval()
    g = model.generation_config
    g.decoder_start_token_id = sot
    g.no_timestamps_token_id = no_ts
    g.lang_to_id = lang_ids
    g.task_to_id = {"translate": sot + 1 + len(langs), "transcribe": sot + 2 + len(langs)}
    g.is_multilingual = True
    g.max_length = 448
    g.begin_suppress_tokens = [220, eot]
    g.suppress_tokens = []
    g.forced_decoder_ids = [[1, None], [2, g.task_to_id["transcribe"]]]
    model.save_pretrained(out, safe_serialization=True)

    # Byte-level BPE: the 256 byte symbols, filler words to fill the text ids, no merges.
    byte_syms = list(pre_tokenizers.ByteLevel.alphabet())
    byte_syms.sort(key=lambda s: ord(s))
    vocab = {s: i for i, s in enumerate(byte_syms)}
    vocab.update({f"Ġt{i}": i for i in range(len(byte_syms), n_text)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.save(os.path.join(out, "tokenizer.json"))
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "tokenizer_class": "WhisperTokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "model_max_length": 1024,
        "errors": "replace", "add_prefix_space": False, "clean_up_tokenization_spaces": False,
        "additional_special_tokens": ["<|endoftext|>", "<|startoftranscript|>"] + langs + tasks})
    WhisperFeatureExtractor(feature_size=80, sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400,
                            padding_value=0.0, return_attention_mask=False).save_pretrained(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=["t5", "whisper"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    (make_t5 if a.shape == "t5" else make_whisper)(a.out)
    n = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print(f"{a.out}: {a.shape}, {n / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
