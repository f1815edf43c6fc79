"""make_tokenizer.py - a small valid tokenizer for a synthetic checkpoint (bench/peers.sh): the
converters it is compared with load one from the checkpoint folder (ONNX Runtime GenAI's builder
calls AutoTokenizer, Optimum copies it into its output), and mobius copies it for ONNX Runtime GenAI.

A word-level tokenizer of exactly the config's vocab_size: <unk> 0, <s> 1, </s> 2, then the words
t3 ... t{vocab-1}, split on whitespace. Written as tokenizer.json and tokenizer_config.json
(PreTrainedTokenizerFast) next to config.json; token ids map one to one onto the embedding rows.

usage: python bench/make_tokenizer.py CHECKPOINT_DIR   (needs the tokenizers package)
"""

import json
import os
import sys

from tokenizers import Tokenizer, models, pre_tokenizers


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/make_tokenizer.py CHECKPOINT_DIR")
    ckpt = sys.argv[1]
    with open(os.path.join(ckpt, "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {t: i for i, t in enumerate(specials)}
    vocab.update({f"t{i}": i for i in range(len(specials), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(specials)
    tok.save(os.path.join(ckpt, "tokenizer.json"))
    with open(os.path.join(ckpt, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "unk_token": "<unk>",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "</s>",
                "model_max_length": 1 << 20,
                "clean_up_tokenization_spaces": False,
            },
            f,
            indent=1,
        )
        f.write("\n")
    print(f"{ckpt}: tokenizer.json, {vocab_size} words")


if __name__ == "__main__":
    main()
