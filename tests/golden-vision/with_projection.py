#!/usr/bin/env python3
"""A CLIPVisionModelWithProjection golden case, computed by real transformers.

The oracle (shared/tools/oracle/gen.py) builds a model type's AutoModel, which for
clip_vision_model is CLIPVisionModel (no projection). This makes the projected tower's case from a
CLIPModel case: its vision_config and its vision tensors (vision_model.*, visual_projection.weight)
saved as a CLIPVisionModelWithProjection checkpoint (save_pretrained), reloaded from disk, and
called (eager attention, float32) on the CLIPModel case's pixel_values; reference.safetensors holds
them and the model's image_embeds and last_hidden_state.

    python with_projection.py CLIP_CASE OUT

Run in the oracle's venv (torch, transformers, safetensors).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

src, out = sys.argv[1], sys.argv[2]
cfg = json.load(open(os.path.join(src, "config.json")))
vision = dict(cfg["vision_config"])
vision["projection_dim"] = cfg.get("projection_dim", vision.get("projection_dim", 512))
config = CLIPVisionConfig(**{k: v for k, v in vision.items() if k not in ("model_type", "transformers_version")})
config.architectures = ["CLIPVisionModelWithProjection"]
weights = load_file(os.path.join(src, "model.safetensors"))
state = {k: v for k, v in weights.items() if k.startswith("vision_model.") or k == "visual_projection.weight"}
model = CLIPVisionModelWithProjection(config)
missing, unexpected = model.load_state_dict(state, strict=False)
assert not unexpected and all(k.endswith("position_ids") for k in missing), (missing, unexpected)
os.makedirs(out, exist_ok=True)
model.save_pretrained(out)
model = CLIPVisionModelWithProjection.from_pretrained(out, attn_implementation="eager").eval()
pixels = load_file(os.path.join(src, "reference.safetensors"))["encode.pixel_values"]
with torch.no_grad():
    r = model(pixel_values=pixels)
save_file({"encode.pixel_values": pixels.contiguous(), "encode.image_embeds": r.image_embeds.contiguous(),
           "encode.last_hidden_state": r.last_hidden_state.contiguous()}, os.path.join(out, "reference.safetensors"))
case = json.load(open(os.path.join(src, "case.json")))
import transformers
json.dump({"model_type": "clip_vision_model", "task": "image-feature-extraction",
           "architecture": "CLIPVisionModelWithProjection",
           "exercises": ["visual_projection of the pooled class token: image_embeds"],
           "reference": f"transformers {transformers.__version__} (torch {torch.__version__}), "
                        "CLIPVisionModelWithProjection from the saved checkpoint, eager attention, float32",
           "weights": "safetensors", "dtype": "float32", "atol": case["atol"], "rtol": case["rtol"],
           "made_from": os.path.basename(os.path.normpath(src)), "steps": ["encode"],
           "outputs": ["last_hidden_state", "image_embeds"]},
          open(os.path.join(out, "case.json"), "w"), indent=2)
print(out, "CLIPVisionModelWithProjection", sum(p.numel() for p in model.parameters()), "parameters")
