#!/usr/bin/env python3
"""Independent reference for the Countdown expression evaluator: random
expressions (binary + - * /, unary minus, parentheses, spaces) evaluated with
Python's fractions.Fraction through ast (no eval of text). Writes
tests/data/tasks/countdown_exprs.tsv: expression, then "num/den", or "div0".

usage: python3 tests/ref/tasks_countdown_ref.py  (from the repository root)
"""
import ast
import random
from fractions import Fraction

rng = random.Random(20240601)


def gen(depth):
    r = rng.random()
    if depth == 0 or r < 0.3:
        return str(rng.randint(0, 120))
    if r < 0.4:
        return "-" + gen(depth - 1)
    if r < 0.55:
        return "(" + gen(depth - 1) + ")"
    op = rng.choice(["+", "-", "*", "/"])
    sp = rng.choice(["", " "])
    return gen(depth - 1) + sp + op + sp + gen(depth - 1)


class TooBig(Exception):
    pass


def value(node):
    v = value_(node)
    if abs(v.numerator) > 2**62 or v.denominator > 2**62:
        raise TooBig  # the C evaluator holds 64-bit rationals; keep the cases within them
    return v


def value_(node):
    if isinstance(node, ast.Expression):
        return value(node.body)
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -value(node.operand)
    if isinstance(node, ast.BinOp):
        a, b = value(node.left), value(node.right)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div):
            if b == 0:
                raise ZeroDivisionError
            return a / b
    raise ValueError(ast.dump(node))


with open("tests/data/tasks/countdown_exprs.tsv", "w") as f:
    n = 0
    while n < 300:
        e = gen(rng.randint(1, 6))
        try:
            v = value(ast.parse(e, mode="eval"))
            out = f"{v.numerator}/{v.denominator}"
        except ZeroDivisionError:
            out = "div0"
        except TooBig:
            continue
        f.write(f"{e}\t{out}\n")
        n += 1
