#!/usr/bin/env python3
"""Writes docs/modules.md from src/lib.rs: each module's line of the module map (the one
source, which tests/layering.rs holds the code to), its summary from lib.rs's list, and its
files under src/. Run from the repository root: python3 scripts/modules-doc.py

With --check it writes nothing and exits 1, naming the page, when docs/modules.md differs
from what it would write (scripts/test.sh runs it so)."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
lib = (root / "src/lib.rs").read_text()
docs = [l[4:] if l.startswith("//! ") else l[3:] for l in lib.splitlines() if l.startswith("//!")]
text = "\n".join(docs)
block = re.search(r"```text\n(.*?)\n```", text, re.S)
if not block:
    sys.exit("src/lib.rs: no ```text module map")

deps: dict[str, str] = {}
current = None
for line in block.group(1).splitlines():
    m = re.match(r"^(\S[^─]*?)\s+─►\s+(.*)$", line)
    if m:
        current = m.group(1).strip()
        deps[current] = m.group(2).strip()
    elif line.startswith(" ") and current:
        deps[current] += " " + line.strip()
    elif ":" in line:
        names, _, what = line.partition(":")
        for n in names.split(","):
            deps[n.strip()] = what.strip()
        current = None

summary: dict[str, str] = {}
bullets = re.findall(r"^- (.*?)(?=^- |\Z)", text.split("```", 2)[2], re.S | re.M)
for b in bullets:
    b = " ".join(b.split())
    names = re.findall(r"\[`(\w+)`\]", b.split(":", 1)[0])
    what = b.split(":", 1)[1].strip() if ":" in b else b
    what = re.sub(r"\[`([\w:]+)`\]", r"`\1`", what)
    for n in names:
        summary[n] = what

modules = re.findall(r"^pub mod (\w+);", lib, re.M)
out = [
    "# Modules",
    "",
    "Written by `python3 scripts/modules-doc.py` from [`src/lib.rs`](../src/lib.rs), whose module",
    "map is the one source: [`tests/layering.rs`](../tests/layering.rs) fails when the code has",
    "an edge the map lacks, or the reverse. The picture and the layering rule are in",
    "[architecture.md](architecture.md). Each section: what the module holds, what it may",
    "reference (its line of the map), and its files.",
    "",
]
for name in modules:
    files = []
    top = root / "src" / f"{name}.rs"
    if top.exists():
        files.append(f"src/{name}.rs")
    sub = root / "src" / name
    if sub.is_dir():
        files += sorted(str(p.relative_to(root)) for p in sub.rglob("*.rs"))
    out += [f"## `{name}`", ""]
    own = ""
    if top.exists():
        head = []
        for line in top.read_text().splitlines():
            if not line.startswith("//!") or line.strip() == "//!":
                break
            head.append(line[3:].strip())
        own = " ".join(head)
    what = summary.get(name) or own
    if what:
        out += [what[0].upper() + what[1:], ""]
    may = " ".join(deps.get(name, "(not in the map)").split())
    out += [f"- **may reference:** {may}"]
    out += ["- **files:** " + ", ".join(f"[`{f[4:]}`](../{f})" for f in files), ""]
page = root / "docs/modules.md"
text_out = "\n".join(out).rstrip() + "\n"
if "--check" in sys.argv[1:]:
    if page.read_text() != text_out:
        sys.exit(
            "docs/modules.md is stale (the module map, summaries or files of src/ changed): "
            "run python3 scripts/modules-doc.py and commit the page"
        )
    sys.exit(0)
page.write_text(text_out)
