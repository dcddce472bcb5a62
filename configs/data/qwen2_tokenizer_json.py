"""Writes DIR/tokenizer.json for a checkpoint that ships only the Qwen2-style
slow tokenizer files (vocab.json, merges.txt, tokenizer_config.json and maybe
added_tokens.json), as Dream-v0-Instruct-7B does; dllm-rl reads tokenizer.json.

    python3 configs/data/qwen2_tokenizer_json.py checkpoints/Dream-v0-Instruct-7B

The file is the one HF's Qwen2 fast tokenizer would be: NFC, the Qwen2
pre-tokenizer regex, byte-level BPE from merges.txt, and the added tokens with
their ids (tokenizer_config.json's added_tokens_decoder, then added_tokens.json).
Only the standard library is needed. An existing tokenizer.json is kept unless
--force."""
import argparse
import json
import os
import sys

# Qwen2's PRETOKENIZE_REGEX (tokenization_qwen2.py; Dream's tokenizer is a copy)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTE_LEVEL = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def fail(msg):
    sys.exit(f"qwen2_tokenizer_json: {msg}")


def added_tokens(d, vocab):
    """[(id, entry)] of the added tokens, by id."""
    out = {}
    cfg_path = os.path.join(d, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            dec = json.load(f).get("added_tokens_decoder", {})
        for k, v in dec.items():
            out[int(k)] = {"content": v["content"], "single_word": v.get("single_word", False),
                           "lstrip": v.get("lstrip", False), "rstrip": v.get("rstrip", False),
                           "normalized": v.get("normalized", False), "special": v.get("special", True)}
    extra = os.path.join(d, "added_tokens.json")
    if os.path.exists(extra):
        with open(extra, encoding="utf-8") as f:
            for content, i in json.load(f).items():
                if i in out and out[i]["content"] != content:
                    fail(f"{extra}: id {i} is '{content}' but tokenizer_config.json says "
                         f"'{out[i]['content']}'")
                out.setdefault(i, {"content": content, "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": False, "special": True})
    for i, t in out.items():
        if t["content"] in vocab and vocab[t["content"]] != i:
            fail(f"added token '{t['content']}' has id {i}, the vocab's is {vocab[t['content']]}")
    return [dict(id=i, **out[i]) for i in sorted(out)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="the checkpoint directory")
    ap.add_argument("--force", action="store_true", help="replace an existing tokenizer.json")
    a = ap.parse_args()
    out_path = os.path.join(a.dir, "tokenizer.json")
    if os.path.exists(out_path) and not a.force:
        fail(f"{out_path} exists (--force replaces it)")
    for name in ("vocab.json", "merges.txt"):
        if not os.path.exists(os.path.join(a.dir, name)):
            fail(f"{a.dir} has no {name}: not a Qwen2-style slow tokenizer")
    with open(os.path.join(a.dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    merges = []
    with open(os.path.join(a.dir, "merges.txt"), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or (n == 1 and line.startswith("#version")):
                continue
            pair = line.split(" ")
            if len(pair) != 2:
                fail(f"merges.txt:{n}: expected two symbols, found {line!r}")
            merges.append(pair)
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens(a.dir, vocab),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated",
             "invert": False},
            dict(type="ByteLevel", **BYTE_LEVEL)]},
        "post_processor": dict(type="ByteLevel", **BYTE_LEVEL),
        "decoder": dict(type="ByteLevel", **BYTE_LEVEL),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
                  "merges": merges},
    }
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    os.replace(tmp, out_path)
    print(f"{out_path}: {len(vocab)} tokens, {len(merges)} merges, "
          f"{len(tok['added_tokens'])} added tokens")


if __name__ == "__main__":
    main()
