#!/usr/bin/env python3
"""A reward program for a custom task (task.reward.command in a dllm-rl config).

dllm-rl starts it once and writes one JSON line per completion to its stdin,
    {"prompt": "20+9=", "completion": "29<...>", "reference": 29}
and reads one line back for each: a number, or {"reward": r, "correct": true|false}.
End of stdin is the end of the run. Anything printed to stderr reaches the user.

The reward here: 1 when the completion starts with the reference's number;
otherwise partial credit, 0.1 for each distinct digit of the reference that the
completion contains (at most 0.5). Correct: the number matches.

    --log FILE   append every request with its answer to FILE (JSON lines)
"""
import argparse
import json
import re
import sys


def score(completion, reference):
    ref = str(reference).strip()
    m = re.match(r"\s*(-?\d+)", completion)
    if m and m.group(1) == ref:
        return 1.0, True
    digits = {c for c in ref if c.isdigit()}
    return min(0.5, 0.1 * sum(1 for d in digits if d in completion)), False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", help="append each request and its answer here")
    args = ap.parse_args()
    log = open(args.log, "a") if args.log else None
    for line in sys.stdin:
        req = json.loads(line)
        reward, correct = score(req["completion"], req["reference"])
        # one answer line per request, flushed: dllm-rl waits for it
        print(json.dumps({"reward": reward, "correct": correct}), flush=True)
        if log:
            log.write(json.dumps({"request": req, "reward": reward, "correct": correct}) + "\n")
            log.flush()


if __name__ == "__main__":
    main()
