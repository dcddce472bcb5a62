#!/usr/bin/env python3
"""Independent reference for d1's GSM8K format rewards (diffu-grpo reward_func.py):
strict format, soft format, integer answer and XML count, written with Python's
re and str methods exactly as d1 uses them (re.match without DOTALL).

Writes tests/data/tasks/gsm8k_format_ref.jsonl: {"completion", "strict", "soft",
"int", "xml"} per line; tests/unit/test_tasks.c checks the C reward against it.

usage: python3 tests/ref/tasks_gsm8k_reward.py  (from the repository root)
"""
import json
import re


def xml_answer(text):
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def strict(text):
    return 0.5 if re.match(r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$", text) else 0.0


def soft(text):
    return 0.5 if re.match(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", text) else 0.0


def integer(text):
    return 0.5 if xml_answer(text).isdigit() else 0.0


def xml_count(text):
    c = 0.0
    if text.count("<reasoning>\n") == 1:
        c += 0.125
    if text.count("\n</reasoning>\n") == 1:
        c += 0.125
    if text.count("\n<answer>\n") == 1:
        c += 0.125
        c -= len(text.split("\n</answer>\n")[-1]) * 0.001
    if text.count("\n</answer>") == 1:
        c += 0.125
        c -= (len(text.split("\n</answer>")[-1]) - 1) * 0.001
    return c


CASES = [
    "<reasoning>\nthink\n</reasoning>\n<answer>\n16\n</answer>\n",
    "<reasoning>\nthink\n</reasoning>\n<answer>\n16\n</answer>\n\n",
    "<reasoning>\nthink\n</reasoning>\n<answer>\n16\n</answer>\n\n\n",
    "<reasoning>\nthink\n</reasoning>\n<answer>\n16\n</answer>",
    "<reasoning>\nline one\nline two\n</reasoning>\n<answer>\n16\n</answer>\n",
    "<reasoning>short</reasoning> <answer>7</answer>",
    "<reasoning>short</reasoning>\n\n<answer>7</answer> trailing",
    "<reasoning>a</reasoning>x</reasoning>\n<answer>1</answer>",
    "<reasoning>a\n</reasoning><answer>1</answer>",
    "<reasoning>a</reasoning><answer>1\n</answer>",
    "<answer>\n42\n</answer>\nsome trailing text after the answer",
    "<answer>\n 42 \n</answer>",
    "<answer>\n4.2\n</answer>",
    "<answer>\n-4\n</answer>",
    "no tags at all 123",
    "123",
    "",
    "\n</answer>\n\n</answer>\n",
    "<reasoning>\n<reasoning>\n</reasoning>\n\n</reasoning>\n<answer>\n1\n</answer>\n",
    "<reasoning>\nhé ü €\n</reasoning>\n<answer>\n5\n</answer>\nnaïve ünïcödé",
    "<answer>1</answer><answer>22</answer>",
    "<answer>22",
    "text </answer> 5 <answer> 6",
    "<reasoning>\r\n..\r\n</reasoning>\n<answer>\n3\n</answer>\n",
    "<reasoning>\nx\n</reasoning>\n<answer>\n\n</answer>\n",
    "<reasoning>a</reasoning>\x1f\x0b<answer>1</answer>",
    "<answer>\x1c 12 \t</answer>",
]

with open("tests/data/tasks/gsm8k_format_ref.jsonl", "w") as f:
    for c in CASES:
        f.write(json.dumps({"completion": c, "strict": strict(c), "soft": soft(c), "int": integer(c),
                            "xml": xml_count(c)}) + "\n")
