#!/usr/bin/env python3
"""make_vision.py - a randomly initialised image classifier of a released model's shape, saved as
transformers saves it (config.json, model.safetensors, preprocessor_config.json), for
bench/vision.sh.

    python make_vision.py --out DIR

google/vit-base-patch16-224's published config: ViTForImageClassification, 224 x 224 images in
16 x 16 patches (196 and the class token), 768 hidden, 12 layers, 12 heads, 3072 intermediate,
exact GELU, LayerNorm eps 1e-12, biased QKV, no pooler, 1000 labels (named LABEL_0 .. LABEL_999
here: the ImageNet names do not change the graph); its image processor (resize to 224 x 224,
rescale by 1/255, normalise with mean and std 0.5). Weights seeded (torch.manual_seed(0)), f32.
"""
import argparse
import json
import os

import torch
from transformers import ViTConfig, ViTForImageClassification

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
a = ap.parse_args()
torch.manual_seed(0)
cfg = ViTConfig(
    hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
    hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.02,
    layer_norm_eps=1e-12, image_size=224, patch_size=16, num_channels=3, qkv_bias=True,
    id2label={i: f"LABEL_{i}" for i in range(1000)}, label2id={f"LABEL_{i}": i for i in range(1000)},
)
cfg.architectures = ["ViTForImageClassification"]
ViTForImageClassification(cfg).eval().save_pretrained(a.out, safe_serialization=True)
# written as ViTImageProcessor.save_pretrained writes it (which would need Pillow to run)
with open(os.path.join(a.out, "preprocessor_config.json"), "w") as f:
    json.dump({"do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
               "image_processor_type": "ViTImageProcessor", "image_std": [0.5, 0.5, 0.5], "resample": 2,
               "rescale_factor": 1 / 255, "size": {"height": 224, "width": 224}}, f, indent=2)
    f.write("\n")
