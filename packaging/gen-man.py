#!/usr/bin/env python3
"""Fills xpress(7)'s template with the README's settings and profiles
tables and docs/statistics.md's reasons table, so the manual page and the
documents cannot drift apart.

usage: gen-man.py TEMPLATE README VERSION STATISTICS > xpress.7
The template's lines @SETTINGS@, @PROFILES@ and @REASONS@ are replaced;
@VERSION@ too.  The README's settings and profiles tables are themselves
generated from common/settings.def (tools/gen-settings.py)."""
import re
import sys


def roff_text(s):
    """Markdown inline text to roff: `code` bold, escapes for roff."""
    s = s.replace("\\", "\\e")
    parts = re.split(r"(`[^`]*`)", s)
    out = []
    for p in parts:
        if p.startswith("`") and p.endswith("`") and len(p) >= 2:
            out.append("\\fB" + p[1:-1].replace("-", "\\-") + "\\fR")
        else:
            p = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", p)
            p = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", p)  # links: their text
            out.append(p)
    line = "".join(out)
    if line.startswith(".") or line.startswith("'"):
        line = "\\&" + line
    return line


def table_after(lines, header_re, where):
    """Rows (lists of cells) of the first markdown table whose header row
    matches header_re."""
    rows, inside = [], False
    for ln in lines:
        if not inside:
            if re.match(header_re, ln):
                inside = True
            continue
        if ln.startswith("| ---"):
            continue
        if not ln.startswith("|"):
            break
        # Split on | not inside backticks.
        cells, cur, code = [], "", False
        for ch in ln.strip()[1:-1]:
            if ch == "`":
                code = not code
            if ch == "|" and not code:
                cells.append(cur.strip())
                cur = ""
            else:
                cur += ch
        cells.append(cur.strip())
        rows.append(cells)
    if not rows:
        sys.exit("gen-man: no table matching %r in %s" % (header_re, where))
    return rows


def tagged(rows, fmt):
    out = []
    for r in rows:
        out.append(".TP")
        out.append(fmt(r))
        out.append(roff_text(r[-1]))
    return out


def main():
    tmpl, readme, version, stats = sys.argv[1:5]
    lines = open(readme, encoding="utf-8").read().splitlines()
    settings = table_after(lines, r"^\| variable \| values", readme)
    profiles = table_after(lines, r"^\| profile \| sets", readme)
    stat_lines = open(stats, encoding="utf-8").read().splitlines()
    reasons = table_after(stat_lines, r"^\| reason \| meaning", stats)
    subst = {
        "@SETTINGS@": tagged(settings, lambda r: roff_text(r[0]) + " (" + roff_text(r[1]) + ")"),
        "@PROFILES@": tagged(profiles, lambda r: roff_text(r[0]) + ": " + roff_text(r[1])),
        "@REASONS@": tagged(reasons, lambda r: roff_text(r[0])),
    }
    for ln in open(tmpl, encoding="utf-8").read().splitlines():
        ln = ln.replace("@VERSION@", version)
        if ln.strip() in subst:
            print("\n".join(subst[ln.strip()]))
        else:
            print(ln)


main()
