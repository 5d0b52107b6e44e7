#!/usr/bin/env python3
"""Checks README.md and docs/*.md against the installed gpumf (CPU path, no GPU
needed).  The pages are read in the order PAGES lists (a page's examples may
use what an earlier page made); every docs/*.md must be listed.

(a) Runs the pages' ```sql blocks in order in one scratch database.  Every
    ```sql block needs a marker on the line before it:
        <!-- test: run -->              run it; any ERROR fails it
        <!-- test: skip: why -->        not run (pg_cron, GPU only, ...)
    Hidden HTML comments between the blocks hold what the examples assume:
        <!-- test: setup                SQL run at that point (sample tables)
        ... -->
        <!-- test: check                statements that must each return t
        ... -->                         (one statement per ';'-ended line run)
(b) Compares the function tables (header "| function | what |") with the
    extension's functions in pg_proc (via pg_depend), argument names, types,
    defaults and results as \\df shows them; the settings tables (header
    "| GUC | default | meaning |") with pg_settings' gpumf.* (name, default,
    "superuser only" for superuser settings, postgresql.conf for sighup ones,
    every enum value); and the composite types written "`gpumf.t` is `(...)`"
    or "`gpumf.t`, `(...)`" with pg_attribute.

The tables of (b) may be on any page: the catalog is compared with all of
them together.

Prints "ok N - ..." / "not ok N - ..." lines and "N passed, M failed".
Usage: readme.py [FILE]  (default: README.md and the pages of PAGES; a FILE
is checked alone).
Uses the server PGHOST/PGPORT/PGUSER point at; database $GPUMF_README_DB
(default gpumf_readme), dropped and created afresh.
"""
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the documentation, in the order its examples run (README.md's first session
# makes the tables and models the others use)
PAGES = ["README.md", "docs/install.md", "docs/serving.md", "docs/pgvector.md",
         "docs/operations.md", "docs/explicit.md", "docs/training.md", "docs/tuning.md",
         "docs/linear-algebra.md", "docs/reference.md", "docs/benchmarks.md"]
README = sys.argv[1] if len(sys.argv) > 1 else None
DB = os.environ.get("GPUMF_README_DB", "gpumf_readme")
ENV = dict(os.environ)
ENV["PGOPTIONS"] = (ENV.get("PGOPTIONS", "") + " -c gpumf.device=cpu -c gpumf.progress=off").strip()

n = passed = failed = 0


def ok(desc):
    global n, passed
    n += 1
    passed += 1
    print(f"ok {n} - {desc}", flush=True)


def bad(desc, why):
    global n, failed
    n += 1
    failed += 1
    print(f"not ok {n} - {desc}", flush=True)
    for line in str(why).strip().splitlines()[:15]:
        print(f"#   {line}", flush=True)


def psql(sql, db=DB, tuples=False, timeout=300):
    """Runs sql in one session; returns (ok, stdout, stderr)."""
    cmd = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db]
    if tuples:
        cmd += ["-At", "-F", "\t"]
    try:
        r = subprocess.run(cmd, input=sql, capture_output=True, text=True, env=ENV, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "", f"timed out after {timeout} s"
    return r.returncode == 0, r.stdout, r.stderr


def rows(sql):
    good, out, err = psql(sql, tuples=True)
    if not good:
        raise RuntimeError(err)
    return [line.split("\t") for line in out.splitlines()]


# ---------------------------------------------------------------- (a) blocks
def body_until(lines, i, end):
    """The lines from i up to the line that reads end, and the index after it."""
    j = i
    while j < len(lines) and lines[j].strip() != end:
        j += 1
    return "\n".join(lines[i:j]) + "\n", j + 1


def parse_items(lines):
    """The README's setup/run/check/skip items in order, and marker errors."""
    items, errors = [], []
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        m = re.match(r"<!-- test: (setup|check)\s*$", s)
        if m:
            start = i + 1
            body, i = body_until(lines, i + 1, "-->")
            items.append((m.group(1), start, body, None))
            continue
        if s.startswith("```sql"):
            start = i + 1
            body, i = body_until(lines, i + 1, "```")
            prev = start - 2
            while prev >= 0 and lines[prev].strip() == "":
                prev -= 1
            mark = lines[prev].strip() if prev >= 0 else ""
            mr = re.match(r"<!-- test: (run|skip)(?::\s*(.*?))?\s*-->$", mark)
            if not mr:
                errors.append(start)
            else:
                items.append((mr.group(1), start, body, mr.group(2)))
            continue
        i += 1
    return items, errors


def first_code_line(sql):
    for line in sql.splitlines():
        t = line.strip()
        if t and not t.startswith("--"):
            return t if len(t) <= 70 else t[:67] + "..."
    return "(empty)"


def split_checks(sql):
    stmts, cur = [], []
    for line in sql.splitlines():
        if not line.strip():
            continue
        cur.append(line)
        if line.rstrip().endswith(";"):
            stmts.append("\n".join(cur))
            cur = []
    if cur:
        stmts.append("\n".join(cur))
    return stmts


def run_blocks(pages):
    items, errors = [], []
    for page, lines in pages:
        its, errs = parse_items(lines)
        items += [(kind, f"{page} line {line}", sql, why) for kind, line, sql, why in its]
        errors += [f"{page} line {line}" for line in errs]
    for where in errors:
        bad(f"{where}: the ```sql block has a marker", "put <!-- test: run --> or <!-- test: skip: why --> on the line before it")
    if not items:
        bad("the documentation has runnable SQL blocks", "no <!-- test: run --> block found")
    for kind, line, sql, why in items:
        if kind == "skip":
            print(f"# skipped: {line} ({why or 'no reason given'}): {first_code_line(sql)}")
        elif kind in ("setup", "run"):
            t0 = time.time()
            good, _, err = psql(sql)
            desc = f"{line}: {'setup' if kind == 'setup' else 'example'} runs: {first_code_line(sql)}"
            desc += f" ({time.time() - t0:.1f} s)"
            errs = "\n".join(l for l in err.splitlines() if not l.startswith(("NOTICE", "WARNING", "HINT", "DETAIL")) or "ERROR" in l)
            if good:
                ok(desc)
            else:
                bad(desc, err if err.strip() else errs)
        else:
            for stmt in split_checks(sql):
                good, out, err = psql(stmt, tuples=True)
                desc = f"{line}: check {first_code_line(stmt)}"
                if good and out.strip() == "t":
                    ok(desc)
                else:
                    bad(desc, err if not good else f"returned {out.strip()!r}, not t")


# ------------------------------------------------------ (b) tables vs catalog
TYPE_ALIASES = {
    "int": "integer", "int4": "integer", "int8": "bigint", "int2": "smallint",
    "bool": "boolean", "float8": "double precision", "float4": "real",
    "timestamptz": "timestamp with time zone", "varchar": "character varying",
}


def norm_type(t):
    t = t.strip().lower().replace('"', "")
    arr = ""
    while t.endswith("[]"):
        arr += "[]"
        t = t[:-2].strip()
    return TYPE_ALIASES.get(t, t) + arr


def norm_default(d):
    if d is None:
        return None
    d = d.strip()
    # strip casts: '...'::type, NULL::type, 1::bigint (types may have spaces and [])
    while True:
        m = re.match(r"^(.*?)::[a-z_ ]+(\[\])*$", d, re.S)
        if not m or m.group(1).count("'") % 2:
            break
        d = m.group(1).strip()
    if d.startswith("(") and d.endswith(")"):
        d = d[1:-1].strip()
    if d.startswith("'"):
        return ("literal", d)
    try:
        return ("number", float(d))
    except ValueError:
        return ("word", d.lower())


def split_top(s, sep=","):
    """Splits s on sep outside quotes, parentheses and brackets."""
    out, cur, depth, q = [], "", 0, None
    for ch in s:
        if q:
            cur += ch
            if ch == q:
                q = None
            continue
        if ch in "'\"":
            q = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [x.strip() for x in out]


def parse_arg(a):
    """'name type DEFAULT x' (type optional; OUT/INOUT mode allowed) -> (mode, name, type, default)."""
    mode = "in"
    m = re.match(r"^(IN|OUT|INOUT|VARIADIC)\s+(.*)$", a, re.S)
    if m:
        mode = m.group(1).lower()
        a = m.group(2)
    default = None
    m = re.match(r"^(.*?)\s+DEFAULT\s+(.*)$", a, re.S | re.I)
    if m:
        a, default = m.group(1), m.group(2)
    m = re.match(r'^("[^"]+"|[A-Za-z_][A-Za-z0-9_]*)\s*(.*)$', a, re.S)
    name, typ = m.group(1), m.group(2).strip()
    return mode, name.strip('"'), (typ or None), default


def parse_cols(s):
    """'(a t, b t)' or 'TABLE(a t, b t)' -> [(name, type)]"""
    inner = s[s.index("(") + 1:s.rindex(")")]
    cols = []
    for c in split_top(inner):
        _, name, typ, _ = parse_arg(c)
        cols.append((name, typ))
    return cols


def parse_doc_signature(sig):
    """'name(args) RETURNS ret' -> list of (name, args, ret) (a '[, x t]' group gives two)."""
    sig = sig.strip()
    m = re.match(r"^(gpumf_\w+)\(", sig)
    if not m:
        return None
    depth, q, end = 0, None, None
    for k in range(m.end() - 1, len(sig)):
        ch = sig[k]
        if q:
            q = None if ch == q else q
        elif ch in "'\"":
            q = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                end = k
                break
    if end is None:
        return None
    name, args, rest = m.group(1), sig[m.end():end], sig[end + 1:].strip()
    mr = re.match(r"^RETURNS\s+(.*)$", rest, re.S)
    if rest and not mr:
        return None
    ret = mr.group(1) if mr else None
    variants = [args]
    mo = re.search(r"\s*\[,\s*(.*?)\]\s*$", args)
    if mo:
        base = args[:mo.start()]
        variants = [base, base + ", " + mo.group(1)]
    out = []
    for v in variants:
        out.append((name, [parse_arg(a) for a in split_top(v)], ret.strip() if ret else None))
    return out


def table_rows(pages, header_re):
    """[("page line N", [cells])] of every markdown table whose header matches."""
    out = []
    for page, lines in pages:
        in_table = False
        for i, line in enumerate(lines):
            if re.match(header_re, line.strip()):
                in_table = True
                continue
            if in_table:
                if not line.startswith("|"):
                    in_table = False
                    continue
                if re.match(r"^\|[-| ]+\|$", line.strip()):
                    continue
                out.append((f"{page} line {i + 1}", split_cells(line)))
    return out


def split_cells(line):
    cells, cur, tick = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            tick = not tick
        if ch == "|" and not tick:
            cells.append(cur.strip())
            cur = ""
        else:
            cur += ch
    cells.append(cur.strip())
    return cells


def catalog_functions():
    res = rows("""
        SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
               p.proretset, p.prokind, p.oid
          FROM pg_proc p
          JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
          JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'gpumf'
         ORDER BY 1, 2""")
    support = {r[0] for r in rows("""
        SELECT (SELECT proname FROM pg_proc WHERE oid = f) FROM pg_aggregate a
          JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = a.aggfnoid AND d.deptype = 'e'
          JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'gpumf',
          LATERAL unnest(ARRAY[aggtransfn, aggfinalfn, aggcombinefn, aggserialfn, aggdeserialfn]) f
         WHERE f <> 0""")}
    funcs = []
    for name, args, result, retset, kind, oid in res:
        parsed = [parse_arg(a) for a in split_top(args)] if args else []
        ins = [(nm, typ, df) for mode, nm, typ, df in parsed if mode in ("in", "inout", "variadic")]
        outs = [(nm, typ) for mode, nm, typ, df in parsed if mode in ("out", "inout")]
        if result.startswith("TABLE("):
            outs = parse_cols(result)
        funcs.append({"name": name, "args": args, "ins": ins, "outs": outs, "result": result,
                      "retset": retset == "t", "kind": kind})
    return funcs, support


def match(doc, rowtext, cat):
    """None if the documented signature doc describes catalog declaration cat, else why not."""
    name, dargs, dret = doc
    if name != cat["name"]:
        return "another name"
    ins = list(cat["ins"])
    carrier = None
    for k, (nm, typ, _) in enumerate(ins):
        if nm in ("item_type", "user_type") and norm_type(typ) == "anycompatible":
            carrier = k
    if carrier is not None:
        if f"{ins[carrier][0]} => NULL::" not in rowtext:
            return f"a {ins[carrier][0]} carrier declaration the row does not mention"
        del ins[carrier]
    if [a[1] for a in dargs] != [a[0] for a in ins]:
        return f"arguments ({', '.join(a[1] for a in dargs)}) vs ({', '.join(a[0] for a in ins)})"
    for k, ((_, dn, dt, dd), (cn, ct, cd)) in enumerate(zip(dargs, ins)):
        if dt is None:
            return f"argument {dn} has no type in the README ({norm_type(ct)})"
        if norm_type(dt) != norm_type(ct) and not (norm_type(dt) in ("any", "anyelement") and norm_type(ct) == "text"):
            return f"argument {dn}: {dt} vs {ct}"
        if carrier is not None and k < carrier:
            continue  # the carrier declaration has no defaults before the carrier
        if norm_default(dd) != norm_default(cd):
            return f"argument {dn}: DEFAULT {dd} vs {cd}"
    if dret is None:
        return "no RETURNS in the README"
    r = dret.strip()
    if r.startswith("TABLE(") or r.startswith("("):
        if r.startswith("TABLE(") != cat["retset"]:
            return f"RETURNS {r[:20]}...: the catalog's {'is' if cat['retset'] else 'is not'} a set ({cat['result'][:40]})"
        dcols, ccols = parse_cols(r), cat["outs"]
        if [c[0] for c in dcols] != [c[0] for c in ccols]:
            return f"result columns ({', '.join(c[0] for c in dcols)}) vs ({', '.join(c[0] for c in ccols)})"
        for (dn, dt), (cn, ct) in zip(dcols, ccols):
            if dt is None:
                return f"result column {dn} has no type in the README"
            if norm_type(dt) != norm_type(ct) and not (carrier is not None and norm_type(ct) == "anycompatible"):
                return f"result column {dn}: {dt} vs {ct}"
        return None
    if r.upper().startswith("SETOF "):
        if not cat["retset"] or norm_type(r[6:]) != norm_type(cat["result"][6:]):
            return f"RETURNS {r} vs {cat['result']}"
        return None
    if cat["retset"] or norm_type(r) != norm_type(cat["result"]):
        return f"RETURNS {r} vs {cat['result']}"
    return None


def check_functions(lines):
    """lines: [(page, its lines)]"""
    funcs, support = catalog_functions()
    docs = []
    for line, cells in table_rows(lines, r"^\|\s*function\s*\|\s*what\s*\|$"):
        rowtext = " | ".join(cells)
        sigs = re.findall(r"`(gpumf_\w+\(.*?)`", cells[0])
        if not sigs:
            bad(f"{line}: a function row names a signature", cells[0][:80])
            continue
        for sig in sigs:
            parsed = parse_doc_signature(sig)
            if parsed is None:
                bad(f"{line}: {sig[:60]} parses", "expected `name(args) RETURNS type`")
                continue
            for doc in parsed:
                docs.append((line, doc, rowtext))
    matched = set()
    for line, doc, rowtext in docs:
        whys = []
        hit = False
        for k, cat in enumerate(funcs):
            why = match(doc, rowtext, cat)
            if why is None:
                matched.add(k)
                hit = True
            elif cat["name"] == doc[0]:
                whys.append(f"{cat['name']}({cat['args']}): {why}")
        desc = f"{line}: {doc[0]}({', '.join(a[1] for a in doc[1])}) is a declaration in the catalog"
        if hit:
            ok(desc)
        else:
            bad(desc, "\n".join(whys) if whys else f"no function {doc[0]} in the extension")
    # every declaration of every function: documented (aggregate support functions: named)
    tables_text = "\n".join(" ".join(c) for _, c in table_rows(lines, r"^\|\s*function\s*\|\s*what\s*\|$"))
    names = sorted({f["name"] for f in funcs})
    for nm in names:
        decls = [k for k, f in enumerate(funcs) if f["name"] == nm]
        if nm in support:
            if f"`{nm}`" in tables_text:
                ok(f"{nm} ({len(decls)} declaration{'s' if len(decls) > 1 else ''}, an aggregate's support function) is named in a function table")
            else:
                bad(f"{nm} (an aggregate's support function) is named in a function table", "not found")
            continue
        missing = [funcs[k] for k in decls if k not in matched]
        if missing:
            bad(f"every declaration of {nm} ({len(decls)}) matches a function table row",
                "\n".join(f"{f['name']}({f['args']}) RETURNS {f['result']}" for f in missing))
        else:
            ok(f"every declaration of {nm} ({len(decls)}) matches a function table row")


def check_settings(lines):
    """lines: [(page, its lines)]"""
    docs = {}
    for line, cells in table_rows(lines, r"^\|\s*GUC\s*\|\s*default\s*\|\s*meaning\s*\|$"):
        m = re.match(r"^`(gpumf\.\w+)`$", cells[0])
        d = re.match(r"^`([^`]*)`$", cells[1]) if len(cells) > 1 else None
        if not m or not d or len(cells) != 3:
            bad(f"{line}: a settings row reads | `name` | `default` | meaning |", " | ".join(cells)[:100])
            continue
        docs[m.group(1)] = (line, d.group(1), cells[2])
    good, out, err = psql("LOAD 'gpumf';\nSELECT name, boot_val, context, vartype, coalesce(array_to_string(enumvals, ','), '') "
                          "FROM pg_settings WHERE name LIKE 'gpumf.%' ORDER BY 1;", tuples=True)
    if not good:
        bad("pg_settings lists gpumf's settings", err)
        return
    cat = {r[0]: r[1:] for r in (l.split("\t") for l in out.splitlines())}
    for name in sorted(set(cat) | set(docs)):
        if name not in docs:
            bad(f"setting {name} is in a settings table", f"pg_settings: default {cat[name][0]}, context {cat[name][1]}")
            continue
        line, default, meaning = docs[name]
        desc = f"{line}: setting {name}, default {default}"
        if name not in cat:
            bad(desc, "pg_settings has no such setting")
            continue
        boot, context, vartype, enums = cat[name]
        whys = []
        if default != boot:
            whys.append(f"pg_settings' default (boot_val) is {boot!r}")
        if (context == "superuser") != ("superuser only" in meaning):
            whys.append(f"context is {context}: the meaning should {'' if context == 'superuser' else 'not '}say \"superuser only\"")
        if context in ("sighup", "postmaster") and "postgresql.conf" not in meaning:
            whys.append(f"context is {context}: the meaning should say it is set in postgresql.conf")
        for v in filter(None, enums.split(",")):
            if f"`{v}`" not in meaning:
                whys.append(f"enum value {v} is not in the meaning")
        if whys:
            bad(desc, "\n".join(whys))
        else:
            ok(desc)


def check_types(text):
    flat = re.sub(r"\s*\n\s*", " ", text)
    found = re.findall(r"`gpumf\.(\w+)`(?:,| is) `\(([^`]*)\)`", flat)
    if not found:
        bad("the documentation describes gpumf's composite types", "no `gpumf.t` is `(...)` found")
    for typ, cols in found:
        desc = f"gpumf.{typ} is ({cols[:50]}{'...' if len(cols) > 50 else ''})"
        try:
            cat = rows(f"SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                       f"WHERE a.attrelid = to_regtype('gpumf.{typ}')::text::regclass AND a.attnum > 0 "
                       f"AND NOT a.attisdropped ORDER BY a.attnum")
        except RuntimeError as e:
            bad(desc, e)
            continue
        doc = parse_cols("(" + cols + ")")
        if [(d[0], norm_type(d[1] or "")) for d in doc] == [(c[0], norm_type(c[1])) for c in cat]:
            ok(desc)
        else:
            bad(desc, "catalog: (" + ", ".join(f"{c[0]} {c[1]}" for c in cat) + ")")


def load_pages():
    """[(page, lines)] to check, and the whole text; every docs/*.md must be in PAGES."""
    if README is not None:
        names = [README]
    else:
        names = PAGES
        docs = sorted("docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
        unlisted = [d for d in docs if d not in PAGES]
        missing = [p for p in PAGES if not os.path.exists(os.path.join(ROOT, p))]
        if unlisted or missing:
            bad("every page of docs/ is checked (test/docs/readme.py PAGES)",
                "\n".join([f"{d}: not in PAGES" for d in unlisted] + [f"{p}: listed, missing" for p in missing]))
        else:
            ok(f"every page of docs/ is checked ({len(docs)} pages and README.md)")
    pages, text = [], ""
    for name in names:
        path = name if os.path.isabs(name) or README is not None else os.path.join(ROOT, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            t = f.read()
        pages.append((os.path.relpath(path, ROOT) if README is None else name, t.splitlines()))
        text += t + "\n"
    return pages, text


def main():
    t0 = time.time()
    for stmt in (f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)', f'CREATE DATABASE "{DB}"'):
        good, _, err = psql(stmt + ";", db="postgres")
        if not good:
            bad(f"scratch database {DB}", err)
            print(f"{passed} passed, {failed} failed")
            return 1
    pages, text = load_pages()
    run_blocks(pages)
    psql("CREATE EXTENSION IF NOT EXISTS gpumf;")
    check_functions(pages)
    check_settings(pages)
    check_types(text)
    psql(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE);', db="postgres")
    print(f"# {time.time() - t0:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
