#!/usr/bin/env python3
"""Builds, executes and exports the sweep notebook over one sweep directory, headless.

    python3 notebooks_export/render_sweep.py SWEEP_DIR [--out DIR] [--name sweep]
        [--arms A,B,...] [--about TEXT | --about-file FILE] [--check [--strict]]

writes DIR/NAME.ipynb (executed), DIR/NAME.html (readable without Jupyter) and the
figures DIR/NAME_figures/*.png (DIR defaults to SWEEP_DIR); --arms draws only the
named arms (a run's arm: its name without `seed=N`). The kernel runs in the
current directory, so a relative SWEEP_DIR is what the notebook prints. --check exits 1
unless every figure of build_sweep.FIGURES exists and is not empty and no cell raised;
--strict also fails on a note that a metric is absent. Exit status 2: bad arguments.
"""
import argparse
import datetime
import html
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import build_sweep  # noqa: E402  (beside this file)

# A small stylesheet instead of the full JupyterLab theme (hundreds of KB per page).
CSS = """
body { font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       line-height: 1.45; color: #222; }
pre, code { font-family: monospace; font-size: 0.9em; }
.jp-InputArea, .input_area, div.highlight { background: #f6f6f6; }
pre { padding: 0.5em; overflow-x: auto; }
.jp-OutputArea-output pre, .output_text pre { background: none; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
img { max-width: 100%; }
.jp-InputPrompt, .jp-OutputPrompt, .prompt { display: none; }
"""


def fail(msg, code=2):
    print(f"render_sweep: {msg}", file=sys.stderr)
    sys.exit(code)


def error_outputs(nb):
    """(cell index, ename: evalue) of every error output of an executed notebook."""
    out = []
    for i, c in enumerate(nb.cells):
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                out.append((i, f"{o.get('ename')}: {o.get('evalue')}"))
    return out


def export_html(nb, title):
    from nbconvert import HTMLExporter
    # plain code blocks: highlighting spans triple the page without a stylesheet for them
    plain = {"highlight_code": lambda src, *a, **k: "<pre>" + html.escape(src) + "</pre>"}
    body, _ = HTMLExporter(template_name="basic", filters=plain).from_notebook_node(nb)
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n<title>"
            + html.escape(title) + "</title>\n<style>" + CSS + "</style></head>\n<body>\n"
            + body + "\n</body></html>\n")


def check(fig_dir, nb, strict):
    problems = []
    for name in build_sweep.FIGURES:
        p = os.path.join(fig_dir, name + ".png")
        if not os.path.isfile(p) or os.path.getsize(p) == 0:
            problems.append(f"figure {name}.png is missing or empty")
    for i, e in error_outputs(nb):
        problems.append(f"cell {i} raised {e}")
    notes_path = os.path.join(fig_dir, "notes.json")
    notes = []
    if os.path.isfile(notes_path):
        with open(notes_path) as fh:
            notes = json.load(fh)
    else:
        problems.append("notes.json was not written (the last cell did not run)")
    if strict:
        problems += [f"absent metric: {n['text']}" for n in notes if n["kind"] == "absent"]
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", metavar="SWEEP_DIR",
                    help="a sweep directory: LOG_DIR/NAME of `dllm-rl sweep`")
    ap.add_argument("--out", metavar="DIR", help="output directory (default: SWEEP_DIR)")
    ap.add_argument("--name", default="sweep", help="output base name (default: sweep)")
    ap.add_argument("--arms", metavar="A,B,...",
                    help="draw only these arms (comma-separated; default: every arm)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--about", help="Markdown for the first cell: what it was executed on")
    g.add_argument("--about-file", metavar="FILE", help="the same, read from FILE")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every figure exists and no cell raised")
    ap.add_argument("--strict", action="store_true",
                    help="with --check: a note that a metric is absent fails too")
    a = ap.parse_args()

    if not os.path.isdir(a.sweep_dir):
        fail(f"{a.sweep_dir}: not a directory (expected a sweep directory LOG_DIR/NAME)")
    if not any(os.path.isfile(os.path.join(a.sweep_dir, d, "log.h5"))
               for d in os.listdir(a.sweep_dir)):
        fail(f"{a.sweep_dir}: no RUN/log.h5 in it (expected a sweep directory LOG_DIR/NAME)")
    if a.arms:
        # as the notebook reads it: an arm whose runs have started (a directory) is there
        present = {build_sweep.group_of(d) for d in os.listdir(a.sweep_dir)
                   if os.path.isdir(os.path.join(a.sweep_dir, d))}
        unknown = [x for x in a.arms.split(",") if x.strip() and x.strip() not in present]
        if unknown:
            fail(f"--arms: no run of {', '.join(unknown)} in {a.sweep_dir} "
                 f"(its arms: {', '.join(sorted(present))})")
    if not a.name or "/" in a.name:
        fail(f"--name {a.name!r}: a file base name is expected")
    out_dir = a.out or a.sweep_dir
    os.makedirs(out_dir, exist_ok=True)
    if a.about_file:
        try:
            with open(a.about_file) as fh:
                about = fh.read()
        except OSError as e:
            fail(f"--about-file {a.about_file}: {e.strerror}")
    elif a.about:
        about = a.about
    else:
        n = sum(os.path.isfile(os.path.join(a.sweep_dir, d, "log.h5"))
                for d in os.listdir(a.sweep_dir))
        about = (f"This copy was executed by `render_sweep.py` on the sweep directory "
                 f"`{a.sweep_dir}` ({n} run logs) on "
                 f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.")

    from nbclient import NotebookClient
    import nbformat

    nb = build_sweep.build(about)
    fig_dir = os.path.join(out_dir, a.name + "_figures")
    os.makedirs(fig_dir, exist_ok=True)
    for name in build_sweep.FIGURES + ("notes",):  # no stale figure passes the check
        for ext in (".png", ".json"):
            p = os.path.join(fig_dir, name + ext)
            if os.path.exists(p):
                os.remove(p)
    # the kernel inherits these
    os.environ["SWEEP_DIR"] = a.sweep_dir
    os.environ["SWEEP_ARMS"] = a.arms or ""
    os.environ["FIG_DIR"] = os.path.abspath(fig_dir)
    os.environ.setdefault("MPLBACKEND", "Agg")
    client = NotebookClient(nb, timeout=a.timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": os.getcwd()}})
    client.execute()
    # kernel-local bookkeeping that only makes the committed copy churn
    for c in nb.cells:
        c.get("metadata", {}).pop("execution", None)

    ipynb = os.path.join(out_dir, a.name + ".ipynb")
    nbformat.write(nb, ipynb)
    page = os.path.join(out_dir, a.name + ".html")
    with open(page, "w") as fh:
        fh.write(export_html(nb, f"Sweep {os.path.basename(os.path.normpath(a.sweep_dir))}"))
    sizes = sum(os.path.getsize(os.path.join(fig_dir, p)) for p in os.listdir(fig_dir))
    print(f"wrote {ipynb} ({os.path.getsize(ipynb) // 1024} KB), {page} "
          f"({os.path.getsize(page) // 1024} KB), {fig_dir}/ ({sizes // 1024} KB)")
    errs = error_outputs(nb)
    for i, e in errs:
        print(f"render_sweep: cell {i} raised {e}", file=sys.stderr)
    if a.check:
        problems = check(fig_dir, nb, a.strict)
        for p in problems:
            print(f"render_sweep: check: {p}", file=sys.stderr)
        if problems:
            sys.exit(1)
        print(f"check: {len(build_sweep.FIGURES)} figures present, no cell raised")
    sys.exit(1 if errs else 0)


if __name__ == "__main__":
    main()
