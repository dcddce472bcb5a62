#!/usr/bin/env python3
"""Independent reference for the 4x4 Sudoku fixtures of tests/unit/test_tasks.c.

Enumerates every solved 4x4 grid by brute force over row permutations (there
are 288), then for a few seeded puzzles counts their solutions by checking all
288 grids. Writes tests/data/tasks/sudoku_small.csv, sudoku_small.jsonl and
sudoku_counts.tsv (puzzle, number of solutions, first solution or '-').

usage: python3 tests/ref/tasks_sudoku_ref.py  (from the repository root)
"""
import itertools
import json
import random

OUT = "tests/data/tasks/"


def solved(g):
    rows = [g[r * 4:r * 4 + 4] for r in range(4)]
    cols = [g[c::4] for c in range(4)]
    boxes = [[g[(br + i) * 4 + bc + j] for i in range(2) for j in range(2)] for br in (0, 2) for bc in (0, 2)]
    return all(sorted(u) == list("1234") for u in rows + cols + boxes)


perms = ["".join(p) for p in itertools.permutations("1234")]
grids = [a + b + c + d for a in perms for b in perms for c in perms for d in perms if solved(a + b + c + d)]
assert len(grids) == 288


def solutions(p):
    return [g for g in grids if all(x == "0" or x == y for x, y in zip(p, g))]


rng = random.Random(1234)
pairs = []
while len(pairs) < 4:
    g = rng.choice(grids)
    p = list(g)
    order = list(range(16))
    rng.shuffle(order)
    for k in order[:rng.randint(6, 10)]:
        p[k] = "0"
        if len(solutions("".join(p))) != 1:
            p[k] = g[k]
    pairs.append(("".join(p), g))

with open(OUT + "sudoku_small.csv", "w") as f:
    f.write("Puzzle,Solution\n")
    for p, s in pairs[:3]:
        f.write(f"{p},{s}\n")
with open(OUT + "sudoku_small.jsonl", "w") as f:
    for p, s in pairs[2:]:
        f.write(json.dumps({"puzzle": p, "solution": s}) + "\n")

# puzzles with 1, several and no solutions
probe = [pairs[0][0], "0" * 16, "1000000000000000", "1200340000000000",
         "1100000000000000", "1234341221434321"[:12] + "0000", "1000000000000001"]
with open(OUT + "sudoku_counts.tsv", "w") as f:
    for p in probe:
        s = solutions(p)
        f.write(f"{p}\t{len(s)}\n")
