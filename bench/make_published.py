"""make_published.py - synthetic checkpoints of published configs, made by transformers itself.

    BENCH_PYTHON bench/make_published.py OUT_DIR SIZE_MIB MODEL_TYPE [MODEL_TYPE ...]

For each model type, the published config the graph-only tests hold (the R"({...})" configs of
tests/test_moe_families.cpp and tests/test_decoder_families.cpp, the first of that model_type;
a composite's text_config for llama4) is cut to about SIZE_MIB of bfloat16 weights: fewer layers
(every per-layer list of the config cut alike, layer indices past the end dropped), a smaller
vocabulary when the embeddings alone exceed it, and fewer experts when one layer alone does. transformers builds the model from that config
with random weights and saves it as a hub checkpoint (save_pretrained) in OUT_DIR/<model_type>.
Needs torch and transformers (a python of its own: BENCH_PYTHON); prints one line per checkpoint.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def published(model_type):
    for name in ("tests/test_moe_families.cpp", "tests/test_decoder_families.cpp"):
        text = open(os.path.join(ROOT, name)).read()
        for m in re.finditer(r'R"\((\{.*?\})\)"', text, re.S):
            try:
                cfg = json.loads(m.group(1))
            except json.JSONDecodeError:
                continue
            if cfg.get("model_type") == model_type:
                return cfg
            if model_type == "llama4_text" and cfg.get("model_type") is None and "intermediate_size_mlp" in cfg:
                return dict(cfg, model_type="llama4_text")
    raise SystemExit(f"make_published: no published {model_type} config in the tests")


LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers")
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
INDEX_LISTS = ("moe_layers", "full_attn_idxs", "attn_layer_indices", "mlp_only_layers")


def cut(cfg, layers):
    old = next(cfg[k] for k in LAYER_KEYS if k in cfg)
    out = {}
    for k, v in cfg.items():
        if k in LAYER_KEYS:
            out[k] = layers
        elif isinstance(v, list) and len(v) == old and k not in INDEX_LISTS:
            out[k] = v[:layers]
        elif k in INDEX_LISTS and isinstance(v, list):
            out[k] = [i for i in v if i < layers]
        else:
            out[k] = v
    return out


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out_dir, size = sys.argv[1], float(sys.argv[2]) * 2**20
    for model_type in sys.argv[3:]:
        cfg = published(model_type)
        if model_type == "llama4_text":
            cfg["attn_temperature_tuning"] = bool(cfg.get("attn_temperature_tuning", True))
        def params(c):
            conf = AutoConfig.for_model(c["model_type"], **{k: v for k, v in c.items() if k != "model_type"})
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(conf)
            return conf, sum(p.numel() for p in model.parameters())
        layers = next(cfg[k] for k in LAYER_KEYS if k in cfg)
        _, whole = params(cfg)
        _, one = params(cut(cfg, 1))
        _, two = params(cut(cfg, 2)) if layers > 1 else (None, one)
        per_layer, rest = two - one, 2 * one - two
        budget = size / 2  # bfloat16
        if rest > budget * 0.6:  # the embeddings alone: a smaller vocabulary
            width = max(1, rest // cfg["vocab_size"])
            cfg["vocab_size"] = max(1024, int(budget * 0.3 // width) // 64 * 64)
            for key in ("pad_token_id", "bos_token_id", "eos_token_id"):  # ids within it
                ids = cfg.get(key)
                if isinstance(ids, int) and ids >= cfg["vocab_size"]:
                    cfg[key] = cfg["vocab_size"] - 1
                elif isinstance(ids, list):
                    cfg[key] = [i if i < cfg["vocab_size"] else cfg["vocab_size"] - 1 for i in ids]
            _, one = params(cut(cfg, 1))
            rest = one - per_layer
        expert_key = next((k for k in EXPERT_KEYS if isinstance(cfg.get(k), int) and cfg[k] > 1), None)
        if per_layer > (budget - rest) and expert_key:  # one layer alone: fewer experts
            top_k = max(int(cfg.get("num_experts_per_tok", 1)), 1)
            experts = cfg[expert_key]
            keep = max(top_k, int(experts * (budget - rest) * 0.9 // per_layer))
            cfg[expert_key] = keep
            _, one = params(cut(cfg, 1))
            _, two = params(cut(cfg, 2)) if layers > 1 else (None, one)
            per_layer, rest = two - one, 2 * one - two
        n = max(1, min(layers, int((budget - rest) // max(per_layer, 1))))
        small = cut(cfg, n)
        conf, count = params(small)
        model = AutoModelForCausalLM.from_config(conf, dtype=torch.bfloat16)
        dest = os.path.join(out_dir, model_type)
        model.save_pretrained(dest, max_shard_size="4GB")
        with open(os.path.join(dest, "config.json")) as f:
            saved = json.load(f)
        experts = f", {small[expert_key]} experts" if expert_key else ""
        print(f"{model_type}: {n} of {layers} layers{experts}, vocab {small.get('vocab_size')}, "
              f"{count / 1e9:.2f} B parameters -> {dest} (config.json {len(json.dumps(saved))} bytes)")


if __name__ == "__main__":
    main()
