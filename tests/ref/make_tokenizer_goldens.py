#!/usr/bin/env python3
"""Goldens for tests/unit/test_tokenizer.c and tests/unit/test_chat.c, from the HF `tokenizers`
library (and jinja2 for the chat templates).

    python3 tests/ref/make_tokenizer_goldens.py   # from the repository root

Writes into tests/data/tokenizer/:
  qwen3_goldens.json, qwen3_heldout.json  HF encodings (add_special_tokens=False) of a
                                          varied corpus with the published Qwen3 tokenizer
  char_goldens.json                       the char-level tokenizer (built here from its spec,
                                          independently of the C writer) and its encodings
  variants/*.json + variant_goldens.json  small trained BPE tokenizers exercising the other
                                          pipeline options (ByteLevel regex/prefix space,
                                          every Split behaviour, normalizer sequences,
                                          Digits, added-token flags, WordLevel, templates)
  qwen35-tokenizer.json + qwen35_goldens.json
                                          a small BPE vocabulary trained here, in the pipeline
                                          of transformers' Qwen3_5Tokenizer (NFC, its split
                                          regex with letters and marks together, byte level),
                                          and its encodings; needs transformers 5.x
                                          (`make_tokenizer_goldens.py qwen35` writes only these)
  chat_goldens.json                       Qwen3 and LLaDA chat templates rendered by jinja2
  malformed/*.json                        hostile tokenizer.json files
"""
import gzip
import json
import os
import random

from tokenizers import Tokenizer, AddedToken, models, pre_tokenizers, normalizers, decoders, processors, trainers, Regex

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizer")


def corpus():
    """At least 60 varied cases: scripts, emoji, whitespace, code, numbers, specials."""
    c = [
        "", "a", " ", "  ", "\n", "\t", "Hello world", "Hello, world!", " leading space", "trailing space ",
        "it's they're we've I'm you'll he'd don't IT'S THEY'RE", "'s 't 're 've 'm 'll 'd",
        "1", "12", "123", "1234", "12345", "3.14159", "1,000,000", "-42 +7 1e10 0x1F", "٣٤٥ ١٢ ⅷ ½ ²",
        "multiple   spaces    here", "tabs\tand\t\ttabs", "line1\nline2\n\nline4", "crlf\r\nline\r\n",
        "\r\n\r\n", "   \n   \n", "trailing newline\n", "mixed \t \n \r\n whitespace",
        "naïve café résumé", "nai\u0308ve cafe\u0301 re\u0301sume\u0301",  # combining marks: NFC composes
        "A\u030a \u212b \u00c5",  # Angstrom sign and A-ring
        "\u1100\u1161\u11a8 한국어 텍스트",  # conjoining jamo compose to a syllable
        "日本語のテキスト、漢字とひらがな。", "中文文本：你好，世界！", "العربية نص تجريبي", "हिन्दी पाठ परीक्षण",
        "עברית", "Ελληνικά κείμενο", "Русский текст, ёжик", "ภาษาไทย", "Tiếng Việt có dấu",
        "emoji 🤗🚀✨", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "👍🏽 skin tone", "❤️ heart", "🇯🇵🇺🇸 flags",
        "def f(x):\n    return x ** 2  # square\n", "int main(void) { printf(\"%d\\n\", 42); return 0; }",
        "for (i = 0; i < n; i++) {\n\tsum += a[i];\n}", "<html><body class=\"x\">Hi</body></html>",
        "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "x = y != z && w >= 3 || !q;",
        "https://example.com/path?query=1&other=2#frag", "user@example.com", "$100.00 €50 ¥1000 £3",
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "text<|endoftext|>more",
        "<|endoftext|><|endoftext|>", "<|im_start|><|im_end|>", "<think>\nreasoning\n</think>\n\nanswer",
        "<tool_call>{}</tool_call>", "<|im_start", "|im_end|>", "<|unknown_special|>", "<<|im_start|>>",
        "a" * 300, "supercalifragilisticexpialidocious" * 8, "ab" * 200, "🤗" * 50, "1234567890" * 20,
        " " * 100, "\n" * 20, "-" * 80, "=" * 33 + "\n", "..." * 10, "!!!???", "a.b,c;d:e",
        "Mixed CASE Words And ALLCAPS", "camelCaseIdentifier snake_case_name kebab-case-name",
        "\u00a0non\u00a0breaking\u00a0spaces", "ideographic\u3000space", "next\u0085line", "zero\u200bwidth",
        "thin\u2009space\u2028line\u2029para", "\u0000nul\u0001ctrl\u007fdel", "\ufeffBOM start",
        "ﬁ ligature ﬀ", "Ⅻ roman", "ß straße STRASSE", "İstanbul ıi", "ſ long s 'ſ",
        "é" * 40, "e\u0301" * 20,
    ]
    return c


def heldout():
    """A separate set, generated: random mixes of the pieces above and random code points."""
    rng = random.Random(1234)
    pieces = ["the", " quick", " brown", "fox", " 42", "\n", "  ", "\t", "'s", "é", "e\u0301", "日本", "😀",
              "👩‍💻", "<|im_end|>", "<|endoftext|>", ",", ".", "!", "0", "99", "\r\n", "ЖЖ", "नमस्ते", "ﻻ", "—",
              "'ll", " ", "x" * 17, "\u00a0", "\u3000"]
    out = []
    for _ in range(40):
        out.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 25))))
    ranges = [(0x20, 0x7e), (0xa0, 0x2ff), (0x300, 0x36f), (0x370, 0x52f), (0x600, 0x6ff), (0x900, 0x97f),
              (0x3040, 0x30ff), (0x4e00, 0x4fff), (0xac00, 0xad00), (0x1f300, 0x1f64f)]
    for _ in range(30):
        s = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            s.append(chr(rng.randint(lo, hi)))
            if rng.random() < 0.15:
                s.append(rng.choice([" ", "\n", "  ", "\t"]))
        out.append("".join(s))
    return out


def encode_all(tok, texts, add_special=False):
    cases = []
    for t in texts:
        e = tok.encode(t, add_special_tokens=add_special)
        # decoded == text except where NFC changed the text
        cases.append({"text": t, "ids": e.ids, "decoded": tok.decode(e.ids, skip_special_tokens=False),
                      "decoded_skip": tok.decode(e.ids, skip_special_tokens=True)})
    return cases


def dump(name, obj):
    path = os.path.join(ROOT, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=True, indent=0 if isinstance(obj, dict) and "cases" in obj else 1)
        f.write("\n")


def char_tokenizer_json():
    """The char-level tokenizer spec (see dllm/tokenizer.h), built independently of the C writer."""
    specials = ["<|endoftext|>", "<|startoftext|>", "<|mdm_mask|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"]
    vocab = {s: i for i, s in enumerate(specials)}
    vocab["\n"] = 6
    for c in range(32, 127):
        vocab[chr(c)] = 7 + c - 32
    vocab["<|unk|>"] = 102
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(specials)]
    added.append({"id": 102, "content": "<|unk|>", "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True})
    bos = {"SpecialToken": {"id": "<|startoftext|>", "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<|startoftext|>": {"id": "<|startoftext|>", "ids": [1],
                                                                  "tokens": ["<|startoftext|>"]}}},
        "decoder": {"type": "Fuse"},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<|unk|>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def variants(train_texts):
    """Small trained tokenizers, one per pipeline option the Qwen3 file does not use."""
    out = {}

    def bpe_bytelevel(pre, vocab_size=400, normalizer=None, added=None, post=None, wordlevel=False):
        if wordlevel:
            tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
            trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"])
        else:
            tok = Tokenizer(models.BPE())
            trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                          show_progress=False)
        tok.pre_tokenizer = pre
        if normalizer:
            tok.normalizer = normalizer
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(train_texts, trainer)
        if added:
            tok.add_tokens(added)
        if post:
            tok.post_processor = post
        return tok

    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    out["gpt2_prefix"] = bpe_bytelevel(
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
        added=[AddedToken("<mask>", lstrip=True, rstrip=False, special=True),
               AddedToken("<sep>", rstrip=True, special=True),
               AddedToken("word", single_word=True, special=False),
               AddedToken("Hello", normalized=True, special=False)],
        post=processors.TemplateProcessing(single="<mask> $A <sep>", special_tokens=[("<mask>", 400), ("<sep>", 401)]))
    for beh in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
        for inv in [False, True]:
            pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\s+|[,.!]"), behavior=beh, invert=inv), bl])
            out[f"split_{beh}{'_inv' if inv else ''}"] = bpe_bytelevel(pre, vocab_size=300)
    out["split_literal"] = bpe_bytelevel(pre_tokenizers.Sequence([pre_tokenizers.Split(", ", behavior="isolated"), bl]),
                                         vocab_size=300)
    out["nfkc_lower_digits"] = bpe_bytelevel(
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
        normalizer=normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]), vocab_size=350)
    out["nfd_digits_contig"] = bpe_bytelevel(
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=False), bl]),
        normalizer=normalizers.NFD(), vocab_size=350)
    out["wordlevel"] = bpe_bytelevel(
        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"), bl]),
        vocab_size=200, wordlevel=True)
    ig = bpe_bytelevel(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), vocab_size=400)
    j = json.loads(ig.to_str())
    j["model"]["ignore_merges"] = True
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    out["ignore_merges_pairs"] = Tokenizer.from_str(json.dumps(j))
    return out


def qwen35(train_texts, texts):
    """Qwen3.5's tokenizer pipeline as transformers builds it (Qwen3_5Tokenizer), over a BPE
    vocabulary trained on the corpus, with the chat specials; its file and encodings."""
    from transformers import Qwen3_5Tokenizer
    base = Tokenizer(models.BPE())
    base.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    base.train_from_iterator(train_texts, trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    j = json.loads(base.to_str())
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in j["model"]["merges"]]
    vocab = dict(j["model"]["vocab"])
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for sp in specials:
        vocab[sp] = len(vocab)
    hf = Qwen3_5Tokenizer(vocab=vocab, merges=merges)
    hf.add_special_tokens({"additional_special_tokens": specials[1:]})
    hf.add_tokens(["<think>", "</think>"])
    tok = hf.backend_tokenizer
    # the marks joining letters must matter on this corpus: Qwen3's split differs somewhere
    q3 = Tokenizer.from_str(tok.to_str())
    q3.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
        behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    assert any(q3.encode(t, add_special_tokens=False).ids != tok.encode(t, add_special_tokens=False).ids
               for t in texts)
    return tok, encode_all(tok, texts)


def write_qwen35(cases):
    tok, enc = qwen35(cases + heldout(), cases + heldout() + ["<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n"])
    with open(os.path.join(ROOT, "qwen35-tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok.to_str())
    dump("qwen35_goldens.json", {"tokenizer": "qwen35-tokenizer.json", "add_special_tokens": False, "cases": enc})


def render_chats():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    cfg = json.load(open(os.path.join(ROOT, "qwen3-tokenizer_config.json")))
    # The LLaDA-8B-Instruct tokenizer_config.json chat_template, as published.
    llada_template = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
                      "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                      "{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders
    env.filters["tojson"] = lambda x, **k: json.dumps(x)
    qwen = env.from_string(cfg["chat_template"])
    llada = env.from_string(llada_template)
    d1 = "Respond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>"
    convs = [
        [{"role": "user", "content": "What is 2+2?"}],
        [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi there"}],
        [{"role": "user", "content": "  padded question \n"}],
        [{"role": "user", "content": d1 + "\n\n" + "Janet has 3 apples. How many?"}],
        [{"role": "user", "content": "first"}, {"role": "assistant", "content": "reply one"},
         {"role": "user", "content": "second"}],
        [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>\nold thoughts\n</think>\n\nold answer"},
         {"role": "user", "content": "q2"}, {"role": "assistant", "content": "<think>\nnew thoughts\n</think>\n\nnew answer"}],
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
         {"role": "assistant", "content": "\n\nplain answer"}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a<think>x</think>b"},
         {"role": "user", "content": "r"}],
        [{"role": "user", "content": "ünïcödé 日本 🤗"}],
    ]
    cases = []
    for i, m in enumerate(convs):
        for think in [True, False]:
            cases.append({"format": "qwen3", "messages": m, "enable_thinking": think,
                          "text": qwen.render(messages=m, add_generation_prompt=True, enable_thinking=think, tools=None)})
        cases.append({"format": "llada", "messages": m, "enable_thinking": True,
                      "text": llada.render(messages=m, bos_token="<|startoftext|>", add_generation_prompt=True)})
    return {"jinja2": jinja2.__version__, "d1_system_prompt": d1, "cases": cases}


def malformed():
    base = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}
    full = json.dumps(base)

    def mod(f):
        j = json.loads(full)
        f(j)
        return json.dumps(j, indent=1)

    files = {
        "syntax_truncated.json": json.dumps(base, indent=1)[:120],
        "syntax_trailing_comma.json": '{\n  "model": {"type": "BPE", "vocab": {"a": 0,}, "merges": []}\n}\n',
        "syntax_empty.json": "",
        "syntax_garbage.json": "\x00\x01not json at all",
        "top_array.json": "[1, 2, 3]\n",
        "missing_model.json": mod(lambda j: j.pop("model")),
        "model_not_object.json": mod(lambda j: j.__setitem__("model", [1])),
        "missing_vocab.json": mod(lambda j: j["model"].pop("vocab")),
        "vocab_not_object.json": mod(lambda j: j["model"].__setitem__("vocab", ["a", "b"])),
        "vocab_string_id.json": mod(lambda j: j["model"]["vocab"].__setitem__("a", "0")),
        "vocab_negative_id.json": mod(lambda j: j["model"]["vocab"].__setitem__("a", -5)),
        "vocab_huge_id.json": mod(lambda j: j["model"]["vocab"].__setitem__("a", 2 ** 40)),
        "missing_merges.json": mod(lambda j: j["model"].pop("merges")),
        "merges_not_array.json": mod(lambda j: j["model"].__setitem__("merges", "a b")),
        "merge_unknown_token.json": mod(lambda j: j["model"].__setitem__("merges", ["a c"])),
        "merge_no_space.json": mod(lambda j: j["model"].__setitem__("merges", ["ab"])),
        "merge_three_parts.json": mod(lambda j: j["model"].__setitem__("merges", ["a b c"])),
        "merge_result_missing.json": mod(lambda j: j["model"].__setitem__("merges", ["b a"])),
        "merge_wrong_type.json": mod(lambda j: j["model"].__setitem__("merges", [["a", 1]])),
        "unknown_model.json": mod(lambda j: j["model"].__setitem__("type", "Unigram")),
        "unknown_normalizer.json": mod(lambda j: j.__setitem__("normalizer", {"type": "Precompiled"})),
        "normalizer_no_type.json": mod(lambda j: j.__setitem__("normalizer", {"foo": 1})),
        "unknown_pre_tokenizer.json": mod(lambda j: j.__setitem__("pre_tokenizer", {"type": "Metaspace"})),
        "bad_regex.json": mod(lambda j: j.__setitem__("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "(ab"},
                                                                       "behavior": "Isolated", "invert": False})),
        "bad_behavior.json": mod(lambda j: j.__setitem__("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "a"},
                                                                          "behavior": "Sideways", "invert": False})),
        "added_not_array.json": mod(lambda j: j.__setitem__("added_tokens", {"id": 3})),
        "added_no_content.json": mod(lambda j: j.__setitem__("added_tokens", [{"id": 3, "special": True}])),
        "added_bool_type.json": mod(lambda j: j.__setitem__("added_tokens", [{"id": 3, "content": "<s>", "special": "yes"}])),
        "unk_missing.json": mod(lambda j: j["model"].__setitem__("unk_token", "<unk>")),
        "unknown_decoder.json": mod(lambda j: j.__setitem__("decoder", {"type": "WordPiece"})),
        "template_bad_id.json": mod(lambda j: j.__setitem__("post_processor", {
            "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                     {"Sequence": {"id": "A", "type_id": 0}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [99], "tokens": ["<s>"]}}})),
    }
    d = os.path.join(ROOT, "malformed")
    os.makedirs(d, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text)
    # the well-formed base must load in HF (so the malformed ones differ by the named fault)
    Tokenizer.from_str(full)


def main():
    qwen = Tokenizer.from_str(gzip.open(os.path.join(ROOT, "qwen3-tokenizer.json.gz")).read().decode("utf-8"))
    cases = corpus()
    assert len(cases) >= 60
    dump("qwen3_goldens.json", {"tokenizer": "qwen3-tokenizer.json.gz", "add_special_tokens": False,
                                "cases": encode_all(qwen, cases)})
    dump("qwen3_heldout.json", {"tokenizer": "qwen3-tokenizer.json.gz", "add_special_tokens": False,
                                "cases": encode_all(qwen, heldout())})

    cj = char_tokenizer_json()
    ct = Tokenizer.from_str(json.dumps(cj))
    ctexts = ["", "hello world", "Line one\nLine two\n", "<|startoftext|>abc<|eot_id|>", "tab\there",
              "unicode é 日本 🤗", "<|mdm_mask|><|mdm_mask|>x", "~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./",
              "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>", "<|unk|> literal", "\r\n"]
    cc = []
    for t in ctexts:
        cc.append({"text": t, "ids": ct.encode(t, add_special_tokens=False).ids,
                   "ids_special": ct.encode(t, add_special_tokens=True).ids,
                   "decoded": ct.decode(ct.encode(t, add_special_tokens=False).ids, skip_special_tokens=False),
                   "decoded_skip": ct.decode(ct.encode(t, add_special_tokens=False).ids, skip_special_tokens=True)})
    dump("char_goldens.json", {"vocab_size": ct.get_vocab_size(), "tokenizer": cj, "cases": cc})

    train = cases + heldout()
    vts = variants(train * 3)
    vcases = []
    vtexts = cases[:45] + ["Hello <mask> there<sep>  word words sword word.", " <mask>  <sep>x", "HELLO hello Hello",
                           "digits 0123456789 and ²³ ½", "ǅ ﬁ Ⅻ ÅNGSTRÖM"]
    for name, tok in vts.items():
        with open(os.path.join(ROOT, "variants", name + ".json"), "w", encoding="utf-8") as f:
            f.write(tok.to_str())
        for t in vtexts:
            e = tok.encode(t, add_special_tokens=False)
            es = tok.encode(t, add_special_tokens=True)
            vcases.append({"variant": name, "text": t, "ids": e.ids, "ids_special": es.ids,
                           "decoded": tok.decode(e.ids, skip_special_tokens=False),
                           "decoded_skip": tok.decode(e.ids, skip_special_tokens=True)})
    dump("variant_goldens.json", {"cases": vcases})

    dump("chat_goldens.json", render_chats())
    malformed()


if __name__ == "__main__":
    import sys
    os.makedirs(os.path.join(ROOT, "variants"), exist_ok=True)
    if sys.argv[1:] == ["qwen35"]:
        write_qwen35(corpus())
    else:
        main()
        write_qwen35(corpus())
