#!/usr/bin/env python3
"""The README's settings and profiles tables, generated from the one
declaration of every setting (common/settings.def), so the README, the
manual page (packaging/gen-man.py reads these tables) and the parser
cannot drift apart.

usage: gen-settings.py DEF README --write   rewrite the README's tables
       gen-settings.py DEF README --check   exit 1 (with a diff) when they differ
       gen-settings.py DEF                  print the tables"""
import difflib
import re
import sys

TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_.]*)|(-?[0-9]+)|([(),]))')
BEGIN = "<!-- settings table: generated from common/settings.def by `make settings-doc` -->"
END = "<!-- end of the generated settings table -->"
PBEGIN = "<!-- profiles table: generated from common/settings.def by `make settings-doc` -->"
PEND = "<!-- end of the generated profiles table -->"


def unquote(s):
    return re.sub(r"\\(.)", r"\1", s[1:-1])


def entries(text, macro):
    """Argument lists of every MACRO(...) at the start of a line."""
    out = []
    for m in re.finditer(r"^%s\(" % macro, text, re.M):
        pos, args, cur, depth = m.end(), [], [], 1
        while depth:
            t = TOKEN.match(text, pos)
            if not t:
                sys.exit("gen-settings: cannot parse %s near %r" % (macro, text[pos:pos + 40]))
            pos = t.end()
            s, ident, num, punct = t.groups()
            if punct == "(":
                depth += 1
            elif punct == ")":
                depth -= 1
                if depth == 0:
                    args.append(cur)
                    break
            elif punct == "," and depth == 1:
                args.append(cur)
                cur = []
                continue
            cur.append(s if s is not None else ident if ident is not None else num if num is not None else punct)
        vals = []
        for a in args:
            if a and all(x.startswith('"') for x in a):
                vals.append("".join(unquote(x) for x in a))  # adjacent literals
            else:
                vals.append(" ".join(a))
        out.append(vals)
    return out


def values(kind, dflt, lo, hi, choices, scope, profiles):
    if kind == "flag":
        other = "0" if dflt == "1" else "1"
        v = "`%s`, `%s` (also on/off, true/false, yes/no)" % (dflt, other)
    elif kind in ("count", "kib", "ms", "us"):
        v = "%s-%s, default `%s`" % (lo, hi, dflt)
    elif kind == "bytes":
        v = "bytes, default off" if dflt == "0" else "bytes, default `%s`" % dflt
    elif kind == "choice":
        groups = []  # spellings per value, in order of appearance
        for c in choices.split():
            sp, val = c.split("=")
            for g in groups:
                if g[0] == val:
                    g[1].append(sp)
                    break
            else:
                groups.append((val, [sp]))
        groups.sort(key=lambda g: dflt not in g[1])  # the default's first
        v = ", ".join("/".join("`%s`" % s for s in g[1]) for g in groups)
    elif kind == "path":
        v = "`%s`; a path" % dflt
    elif kind == "log_path":
        v = "stderr; a path, `%p` becomes the pid"
    elif kind == "rules":
        v = "see below; default `%s`" % dflt
    elif kind == "profile":
        v = "none; " + ", ".join("`%s`" % p[0] for p in profiles)
    else:
        sys.exit("gen-settings: unknown kind %s" % kind)
    if scope == "env_only":
        v += "; environment only"
    return v


def tables(def_path):
    text = open(def_path, encoding="utf-8").read()
    text = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith(("//", "#")))
    settings = entries(text, "XP_SETTING")
    profiles = entries(text, "XP_PROFILE")
    rows = ["| variable | values (default first) | meaning |", "| --- | --- | --- |"]
    for s in settings:
        ident, kind, dflt, lo, hi, choices, scope, _field, help_ = s
        rows.append("| `XPRESS_%s` | %s | %s |" % (
            ident, values(kind, dflt, lo, hi, choices, scope, profiles), help_))
    prows = ["| profile | sets | for |", "| --- | --- | --- |"]
    for name, sets, help_ in profiles:
        shown = ", ".join("`XPRESS_%s=%s`" % (kv.split("=")[0].upper(), kv.split("=")[1])
                          for kv in sets.split())
        prows.append("| `%s` | %s | %s |" % (name, shown, help_))
    return rows, prows


def replace_block(lines, begin, end, rows):
    try:
        b, e = lines.index(begin), lines.index(end)
    except ValueError:
        sys.exit("gen-settings: the README has no %r ... %r block" % (begin, end))
    return lines[:b + 1] + rows + lines[e:]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows, prows = tables(sys.argv[1])
    if len(sys.argv) == 2:
        print("\n".join(rows + [""] + prows))
        return
    readme, mode = sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "--check"
    old = open(readme, encoding="utf-8").read().splitlines()
    new = replace_block(replace_block(old, BEGIN, END, rows), PBEGIN, PEND, prows)
    if mode == "--write":
        if new != old:
            open(readme, "w", encoding="utf-8").write("\n".join(new) + "\n")
        return
    if new != old:
        sys.stdout.writelines(difflib.unified_diff(
            [x + "\n" for x in old], [x + "\n" for x in new], readme, "generated from " + sys.argv[1]))
        print("gen-settings: %s's settings tables differ from %s: run `make settings-doc`"
              % (readme, sys.argv[1]))
        sys.exit(1)


main()
