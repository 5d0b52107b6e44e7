#!/usr/bin/env python3
"""check-deps.py: gpumf's file-level dependencies against ARCHITECTURE.md.

Derives two graphs between the source files of src/pg, src/core and cuda/:

  includes  every #include "..." resolved to a file of the repository;
  symbols   from the objects of a build (nm): file A depends on file B when
            A's object leaves undefined a symbol that B's object defines.

and checks them against the layout ARCHITECTURE.md describes:

  layers    src/pg -> src/core; cuda/ uses only the core's shared (ABI)
            headers and csr.c, which the module links; nothing below src/pg
            reaches up, and the core reaches cuda/ only through dlopen;
  lines     within and across layers a file of one product line uses its own
            line, common, and the lines below it:
                common < model < serve < train,   linalg -> common only
            (src/pg/gpumf.c, the module's entry point, sits above them all);
  cycles    no circle between files (strongly connected components of the
            symbol graph and of the include graph);
  size      a file over 1,000 lines is one ARCHITECTURE.md names as reading
            best whole;
  the page  every folder of the three layers is in ARCHITECTURE.md's table,
            and every source file the page names exists.

Run after a build (make; the CUDA module's objects are cuda/obj/*.o, made
where nvcc exists): python3 scripts/check-deps.py [--verbose] [--graph].
Prints one "ok N - ..." / "not ok N - ..." line a check and ends with
"N passed, M failed" (test/run_all.sh counts it).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = {"src/pg": "pg", "src/core": "core", "cuda": "cuda"}
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
# product lines and the lines each may use besides its own and common
LINES = ("common", "model", "serve", "train", "linalg")
MAY_USE = {
    "common": set(),
    "model": set(),
    "serve": {"model"},
    "train": {"model", "serve"},
    "linalg": set(),
    "top": {"common", "model", "serve", "train", "linalg"},
}
# what of the core the CUDA module may use: the headers shared with the
# core (the ABI) and csr.c (gm_csr_nnz_bins, linked into the module)
CUDA_MAY_USE_CORE = {"gm_errors.h", "gm_algo.h", "gm_core.h", "gm_score.h", "gm_linalg.h",
                     "gm_explicit.h", "gm_ccd_plan.h", "csr.c"}
MAX_LINES = 1000


def rel(p):
    return os.path.relpath(p, ROOT)


def place(path):
    """(layer, line) of a repository path, or None outside the layers."""
    for prefix, layer in LAYERS.items():
        if path.startswith(prefix + "/"):
            rest = path[len(prefix) + 1:].split("/")
            if len(rest) == 1:
                return (layer, "top")
            return (layer, rest[0])
    return None


def source_files():
    out = []
    for prefix in LAYERS:
        for d, _, files in os.walk(os.path.join(ROOT, prefix)):
            if "/obj" in d.replace(ROOT, ""):
                continue
            for f in files:
                if f.endswith(SOURCE_EXT):
                    out.append(rel(os.path.join(d, f)))
    return sorted(out)


def allowed(a, b):
    """May file a depend on file b?  None when yes, else the reason."""
    pa, pb = place(a), place(b)
    if pa is None or pb is None or a == b:
        return None
    (la, ya), (lb, yb) = pa, pb
    if la == "pg" and lb == "cuda":
        return "src/pg reaches cuda/ (the core loads the module)"
    if la == "core" and lb != "core":
        return "src/core reaches %s (the core depends on nothing above or beside it)" % (
            "src/pg" if lb == "pg" else "cuda/ other than through dlopen")
    if la == "cuda" and lb == "pg":
        return "cuda/ reaches src/pg"
    if la == "cuda" and lb == "core" and os.path.basename(b) not in CUDA_MAY_USE_CORE:
        return "cuda/ uses a core file outside the shared headers and csr.c"
    if yb == "top":
        return "nothing may depend on the entry point %s" % b
    if ya == yb or yb == "common" or yb in MAY_USE.get(ya, set()):
        return None
    return "line %s may not use line %s" % (ya, yb)


# ------------------------------------------------------------ includes

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_graph(files):
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    edges, unresolved = {}, []
    for f in files:
        layer = place(f)[0]
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as h:
            text = h.read()
        for name in INCLUDE.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(f), name))
            if os.path.exists(os.path.join(ROOT, target)):
                edges.setdefault(f, {})[target] = [name]
                continue
            cands = by_name.get(os.path.basename(name), [])
            # the include path: the file's own layer first, then the core's
            own = [c for c in cands if place(c)[0] == layer]
            pick = own or [c for c in cands if place(c)[0] == "core"]
            if len(pick) == 1:
                edges.setdefault(f, {})[pick[0]] = [name]
            elif not cands:
                # PostgreSQL's or the system's ("postgres.h", "utils/rel.h")
                continue
            else:
                unresolved.append("%s: \"%s\" (%s)" % (f, name, ", ".join(pick) or "no such file"))
    return edges, unresolved


# ------------------------------------------------------------- symbols

def object_of(src):
    """The object a source file builds into, or None (headers)."""
    if src.endswith(".c") and place(src)[0] in ("pg", "core"):
        return src[:-2] + ".o"
    if src.endswith(".cu"):
        return "cuda/obj/" + os.path.basename(src)[:-3] + ".o"
    return None


def nm(obj):
    out = subprocess.run(["nm", "-P", os.path.join(ROOT, obj)], capture_output=True,
                         text=True, check=True).stdout
    strong, weak, undef = set(), set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undef.add(name)
        elif kind in "VWvw":
            weak.add(name)
        elif kind.isupper():
            strong.add(name)
    return strong, weak, undef


def symbol_graph(files):
    objs, missing = {}, []
    for f in files:
        o = object_of(f)
        if o is None:
            continue
        if os.path.exists(os.path.join(ROOT, o)):
            objs[f] = o
        else:
            missing.append((f, o))
    # the module's private copy of csr.c counts as csr.c
    csr = [f for f in files if f.endswith("/csr.c") and place(f)[0] == "core"]
    extra = {}
    if csr and os.path.exists(os.path.join(ROOT, "cuda/obj/core_csr.o")):
        extra["cuda/obj/core_csr.o"] = csr[0]
    owner, weak_owner, undef = {}, {}, {}
    tables = [(f, o) for f, o in objs.items()] + [(f, o) for o, f in extra.items()]
    for f, o in tables:
        strong, weak, u = nm(o)
        for s in strong:
            owner.setdefault(s, f)
        for s in weak:
            weak_owner.setdefault(s, set()).add(f)
        undef.setdefault(f, set()).update(u)
    edges = {}
    for f, syms in undef.items():
        for s in syms:
            t = owner.get(s)
            if t is None and len(weak_owner.get(s, ())) == 1:
                t = next(iter(weak_owner[s]))
            if t is not None and t != f:
                edges.setdefault(f, {}).setdefault(t, []).append(s)
    return edges, missing


# --------------------------------------------------------------- graphs

def cycles(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    nodes = set(edges) | {t for ts in edges.values() for t in ts}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def violations(edges):
    out = []
    for a in sorted(edges):
        for b in sorted(edges[a]):
            why = allowed(a, b)
            if why:
                what = " ".join(sorted(edges[a][b])[:4])
                out.append("%s -> %s (%s): %s" % (a, b, what, why))
    return out


# ------------------------------------------------------------ the page

def page_checks(files):
    path = os.path.join(ROOT, "ARCHITECTURE.md")
    if not os.path.exists(path):
        return ["ARCHITECTURE.md is missing"], []
    with open(path, encoding="utf-8") as h:
        page = h.read()
    problems = []
    folders = sorted({os.path.dirname(f) for f in files if place(f)[1] != "top"})
    for d in folders:
        if d + "/" not in page and "`" + d + "`" not in page:
            problems.append("folder %s is not in ARCHITECTURE.md" % d)
    names = {os.path.basename(f) for f in files}
    for tok in sorted(set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*\.(?:c|h|cu|cuh))\b", page))):
        if tok not in names:
            problems.append("ARCHITECTURE.md names %s, which does not exist" % tok)
    whole = set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*\.(?:c|cu))\b",
                           page.split("read best whole", 1)[1] if "read best whole" in page else ""))
    big = []
    for f in files:
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as h:
            n = sum(1 for _ in h)
        if n > MAX_LINES and os.path.basename(f) not in whole:
            big.append("%s: %d lines, not listed as reading best whole in ARCHITECTURE.md" % (f, n))
    return problems, big


def main():
    verbose = "--verbose" in sys.argv
    files = source_files()
    results = []

    def check(ok, what, details=()):
        results.append(ok)
        print("%s %d - %s" % ("ok" if ok else "not ok", len(results), what))
        if not ok or verbose:
            for d in details:
                print("#   " + d)

    inc, unresolved = include_graph(files)
    check(not unresolved, "every #include \"...\" names one file of the repository", unresolved)
    check(not violations(inc), "includes follow the layers and lines", violations(inc))
    cyc = cycles(inc)
    check(not cyc, "no circle of includes", [" <-> ".join(c) for c in cyc])

    sym, missing = symbol_graph(files)
    core_missing = [f for f, o in missing if not f.endswith(".cu")]
    cu_missing = [f for f, o in missing if f.endswith(".cu")]
    check(not core_missing, "every C file of src/ is built (run make first)",
          ["%s: no %s" % (f, o) for f, o in missing if f in core_missing])
    if cu_missing:
        print("# cuda/: %d of %d modules not built (no nvcc?): their calls are checked by includes only"
              % (len(cu_missing), len([f for f in files if f.endswith('.cu')])))
    check(not violations(sym), "calls (defined vs undefined symbols) follow the layers and lines",
          violations(sym))
    cyc = cycles(sym)
    check(not cyc, "no circle of calls between files", [" <-> ".join(c) for c in cyc])

    problems, big = page_checks(files)
    check(not problems, "ARCHITECTURE.md lists every folder and names only files that exist", problems)
    check(not big, "files over %d lines read best whole (ARCHITECTURE.md says which)" % MAX_LINES, big)

    if "--graph" in sys.argv:
        for a in sorted(sym):
            for b in sorted(sym[a]):
                print("# calls %s -> %s: %s" % (a, b, " ".join(sorted(sym[a][b]))))
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
