#!/usr/bin/env python3
"""Every relative link of the repository's Markdown files resolves: the file exists and,
for `#anchor` links, so does a heading of that GitHub slug. Exit 1 listing the broken ones."""
import os, re, subprocess, sys

root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                      check=True).stdout.strip()
files = subprocess.run(["git", "ls-files", "*.md"], cwd=root, capture_output=True, text=True,
                       check=True).stdout.split()

def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")

anchors = {}
def anchors_of(path):
    if path not in anchors:
        found, seen = set(), {}
        in_code = False
        for line in open(path, encoding="utf-8"):
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            m = re.match(r"^#{1,6} (.*)", line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
        anchors[path] = found
    return anchors[path]

bad = []
link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
for f in files:
    path = os.path.join(root, f)
    in_code = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        for target in link.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            name, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), name)) if name else path
            if not os.path.exists(dest) or not dest.startswith(root):
                bad.append(f"{f}:{n}: {target}: no such file in the repository")
            elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                bad.append(f"{f}:{n}: {target}: no heading #{anchor}")
for b in bad:
    print(b)
print(f"links: {len(files)} Markdown files checked, {len(bad)} broken")
sys.exit(1 if bad else 0)
