"""A Markdown file's generated block: the text between <!-- NAME:begin --> and
<!-- NAME:end -->, which the tables' scripts write (--write) or compare with what they
make from the runs (--check). Standard library only."""
import sys


def sync(path, name, text, check, who):
    """Writes text (ending in a newline) into path's NAME block, or (check) compares: exit 1
    when the block differs, exit 2 when the file or the block is missing."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    try:
        with open(path) as f:
            doc = f.read()
    except OSError as e:
        print(f"{who}: {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    i, j = doc.find(begin), doc.find(end)
    if i < 0 or j < i:
        print(f"{who}: {path}: no {begin} ... {end} block", file=sys.stderr)
        sys.exit(2)
    new = doc[:i + len(begin)] + "\n" + text + doc[j:]
    if check:
        if new != doc:
            print(f"{who}: {path}: the {name} block differs from the runs' (--write updates it)",
                  file=sys.stderr)
            sys.exit(1)
        print(f"{who}: {path}: the {name} block is the runs'")
        return
    with open(path, "w") as f:
        f.write(new)
