#!/usr/bin/env python3
"""make_encoder.py - a randomly initialised BERT checkpoint of a released model's shape, saved as
transformers saves it (config.json, model.safetensors), for bench/encoder.sh.

    python make_encoder.py --shape bert-base|minilm --out DIR

bert-base: bert-base-uncased's sizes (768 hidden, 12 layers, 12 heads, 3072 intermediate);
minilm: sentence-transformers/all-MiniLM-L6-v2's (384 hidden, 6 layers, 12 heads, 1536).
"""
import argparse

import torch
from transformers import BertConfig, BertModel

SHAPES = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
}

ap = argparse.ArgumentParser()
ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.manual_seed(0)
cfg = BertConfig(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, **SHAPES[a.shape])
cfg.architectures = ["BertModel"]
BertModel(cfg).eval().save_pretrained(a.out, safe_serialization=True)
