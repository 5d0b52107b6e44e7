#!/usr/bin/env python3
"""The SQL path around the kernels: what gpumf_train and gpumf_recommend spend
outside the training itself, beside PostgreSQL's own bulk paths on the same
data, in one run.  Prints markdown tables.

Sources: the Gowalla check-in split (810,128 rows, 29,858 users x 40,981
items; loaded here with COPY from the LightGCN train.txt, never committed)
and gpumf_synthetic(138493, 26744, 20000263) (20M rows, ML-20M shaped).

 1. Reading: COPY (SELECT ...) TO '/dev/null' (FORMAT binary), SELECT count(*)
    serial and parallel, and gpumf's three reads (the executor through a view,
    its own scan alone, its own scan with parallel workers).
 2. gpumf_train by phase (read, CSR, transfer, train, loss, store, commit) for
    each source and factors, in one transaction each (commit timed apart);
    the first training of a session (CUDA set up included) and a second one.
 2b. A new session's first training without the training service, with its
    worker cold and with it warm (GPU runs only).
 3. Storing the factors beside COPY FROM (FORMAT binary, FREEZE) of the same
    rows into tables of the same shape created in one transaction, with the
    same primary keys built after: MB/s for both.
 4. Serving start-up: loading the library, a session's first gpumf_recommend
    and the steady state: the first session after the trainings (it reads the
    version into shared memory), the next (it attaches), one that reads its
    own copy, and the first after a retraining of the served model (whose
    commit had a background worker read the new version into shared memory).

Needs a server (source test/pgenv.sh, or .pgbundle/device-pg.sh on the GPU
machine) with gpumf installed, run as a user whose server can write a
directory under $TMPDIR (for COPY TO/FROM files).  Settings by environment:
  DEVICE=auto|cpu|gpu   ITERS (15; 1 on DEVICE=cpu)   FACTORS="64 512"
  SOURCES="1m 20m"   REPEAT=2 (trainings per configuration, one session)
  WORKERS (parallel workers for count(*) and gpumf alike: the sources'
  parallel_workers option and max_parallel_workers_per_gather; default:
  cores - 1, at most max_worker_processes - 2)
  GOWALLA=path/to/train.txt (default: .bench-data/gowalla_train.txt in the
  repository)
  KEEP=1 (reuse the source tables)   BENCH_DB=gpumf_sqlpath
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

DB = os.environ.get("BENCH_DB", "gpumf_sqlpath")
DEVICE = os.environ.get("DEVICE", "auto")
ITERS = int(os.environ.get("ITERS", "1" if DEVICE == "cpu" else "15"))
FACTORS = [int(k) for k in os.environ.get("FACTORS", "64 512").split()]
SOURCES = os.environ.get("SOURCES", "1m 20m").split()
REPEAT = int(os.environ.get("REPEAT", "2"))
KEEP = os.environ.get("KEEP", "") != ""
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
GOWALLA = os.environ.get("GOWALLA") or next(
    (p for p in [os.path.join(REPO, ".bench-data", "gowalla_train.txt")] if os.path.exists(p)),
    None)

# source name -> (table, value column or None, description)
TABLES = {"1m": ("gowalla", None, "Gowalla check-ins (LightGCN split)"),
          "20m": ("ml20m", "value", "gpumf_synthetic(138493, 26744, 20000263)")}
TARGETS = {("1m", 512): 1.0, ("20m", 64): 2.5}   # seconds, whole gpumf_train on the GPU

BASE_OPTS = "-c gpumf.progress=off -c gpumf.device=%s" % DEVICE


class Psql:
    """One psql run: rows (lists of fields), the time of each statement (s), stderr."""

    def __init__(self, sql, opts="", db=DB, check=True):
        env = dict(os.environ, PGOPTIONS=(BASE_OPTS + " " + opts).strip())
        p = subprocess.run(["psql", "-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", db, "-f", "-"],
                           input="\\timing on\n" + sql, capture_output=True, text=True, env=env)
        if check and p.returncode != 0:
            sys.exit("psql failed (%d): %s\n-- in --\n%s" % (p.returncode, p.stderr.strip(), sql))
        self.rows, self.times = [], []
        for line in p.stdout.splitlines():
            m = re.match(r"^Time: ([0-9.]+) ms", line)
            if m:
                self.times.append(float(m.group(1)) / 1000.0)
            elif line:
                self.rows.append(line.split("|"))
        self.err = p.stderr

    def debug(self, pattern):
        """The groups of the last DEBUG line matching pattern (client_min_messages=debug1)."""
        found = re.findall(pattern, self.err)
        return found[-1] if found else None


def q(sql, opts=""):
    return Psql(sql, opts).rows


def one(sql, opts=""):
    return q(sql, opts)[0][0]


def fmt(x, digits=2):
    return "-" if x is None else ("%.*f" % (digits, x))


def table(header, rows):
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    print()


# ------------------------------------------------------------------ setup

def setup():
    have = subprocess.run(["psql", "-X", "-qAt", "-d", "postgres", "-c",
                           "SELECT 1 FROM pg_database WHERE datname = '%s'" % DB],
                          capture_output=True, text=True).stdout.strip()
    if have != "1":
        subprocess.run(["createdb", DB], check=True)
    q("CREATE EXTENSION IF NOT EXISTS gpumf")
    for src in SOURCES:
        tbl = TABLES[src][0]
        exists = one("SELECT count(*) FROM pg_class WHERE relname = '%s' AND relkind = 'r'" % tbl)
        if exists == "1" and KEEP:
            continue
        t0 = time.time()
        if src == "1m":
            if not GOWALLA:
                sys.exit("the Gowalla split is missing: set GOWALLA=path/to/train.txt "
                         "(lines 'user item item ...'), or copy it to .bench-data/gowalla_train.txt")
            Psql("""
DROP TABLE IF EXISTS gowalla CASCADE;
CREATE TEMP TABLE gowalla_lines (line text);
\\copy gowalla_lines FROM '%s'
CREATE TABLE gowalla AS
  SELECT a[1]::integer AS user_id, unnest(a[2:])::integer AS item_id
    FROM (SELECT pg_catalog.string_to_array(line, ' ') AS a FROM gowalla_lines) s;
VACUUM (FREEZE, ANALYZE) gowalla;""" % GOWALLA.replace("'", "''"))
        else:
            Psql("""
DROP TABLE IF EXISTS ml20m CASCADE;
CREATE TABLE ml20m AS SELECT user_id, item_id, value
  FROM gpumf_synthetic(138493, 26744, 20000263, seed => 20);
VACUUM (FREEZE, ANALYZE) ml20m;""")
        print("loaded %s in %.1f s" % (tbl, time.time() - t0), file=sys.stderr)
    for src in SOURCES:
        tbl = TABLES[src][0]
        q("CREATE OR REPLACE VIEW %s_view AS SELECT * FROM %s" % (tbl, tbl))


def workers_default():
    if "WORKERS" in os.environ:
        return int(os.environ["WORKERS"])
    mwp = int(one("SHOW max_worker_processes"))
    mpw = int(one("SHOW max_parallel_workers"))
    # leave one background worker for pg_cron's launcher (and one spare)
    return max(0, min((os.cpu_count() or 2) - 1, mwp - 2, mpw))


# ------------------------------------------------------------------ 1. reading

def cols(src):
    tbl, val, _ = TABLES[src]
    return tbl, "user_id, item_id" + (", " + val if val else "")


def gpumf_read(src, relname, opts):
    """gpumf's read of relname (a training at factors 8, one iteration): seconds, workers."""
    tbl, val, _ = TABLES[src]
    p = Psql("SET client_min_messages = debug1;\n"
             "SELECT read_seconds FROM gpumf_train('%s', 'user_id', 'item_id', %s, factors => 8, "
             "iterations => 1, model => 'bench_read');" % (relname, "'%s'" % val if val else "NULL"),
             opts)
    how = p.debug(r"gpumf: read \S+ (with a scan of its own, (\d+) parallel workers|through the executor)")
    workers = int(how[1]) if how and how[1] else 0
    return float(p.rows[0][0]), workers


def bench_read(W):
    print("### 1. Reading the source (seconds, fastest of 2; warm cache; the parallel rows "
          "with parallel_workers = %d on the table and max_parallel_workers_per_gather = %d)"
          % (max(W, 1), W))
    print()
    rows = []
    for src in SOURCES:
        tbl, c = cols(src)
        n = int(one("SELECT count(*) FROM %s" % tbl))
        copy_sql = "COPY (SELECT %s FROM %s) TO '/dev/null' (FORMAT binary);\n" % (c, tbl)
        Psql(copy_sql)                                 # warm the cache
        copy = min(Psql(copy_sql * 2).times)
        ser = min(Psql("SET max_parallel_workers_per_gather = 0;\n" +
                       "SELECT count(*) FROM %s;\n" % tbl * 2).times[1:])
        par_opts = "-c max_parallel_workers_per_gather=%d" % W
        par = min(Psql(("SELECT count(*) FROM %s;\n" % tbl) * 2, par_opts).times)
        plan = "\n".join(r[0] for r in q("EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) "
                                         "SELECT count(*) FROM %s" % tbl, par_opts))
        m = re.search(r"Workers Launched: (\d+)", plan)
        cw = int(m.group(1)) if m else 0
        ex = min(gpumf_read(src, tbl + "_view", par_opts)[0] for _ in range(2))
        alone = min(gpumf_read(src, tbl, "-c gpumf.read_workers=0")[0] for _ in range(2))
        reads = [gpumf_read(src, tbl, par_opts) for _ in range(2)]
        best = min(reads)
        rows.append([src, n, fmt(copy), fmt(ser), "%s (%d)" % (fmt(par), cw), fmt(ex), fmt(alone),
                     "%s (%d)" % (fmt(best[0]), best[1]),
                     "%.2fx" % (copy / best[0]), "%.2fx" % (par / best[0]),
                     "%.2fx" % (copy / alone)])
    table(["source", "rows", "COPY (SELECT ...) TO /dev/null binary", "count(*) serial",
           "count(*) parallel (workers)", "gpumf via the executor (a view)",
           "gpumf own scan, alone", "gpumf own scan, parallel (workers)",
           "parallel gpumf vs COPY", "parallel gpumf vs parallel count(*)",
           "gpumf alone vs COPY"], rows)
    q("SELECT gpumf_drop_model('bench_read', if_exists => true)")


# ------------------------------------------------------------------ 2. phases

STORE_RE = r"gpumf: factor tables created in ([0-9.]+) s, filled in ([0-9.]+) s, indexed in ([0-9.]+) s"


def train_session(src, k, unlogged, W, repeat=REPEAT, extra="", tag=""):
    """repeat trainings of one model in one session; per training a dict of phases."""
    tbl, val, _ = TABLES[src]
    model = "bench_%s_k%d%s%s" % (src, k, "_unlogged" if unlogged else "", tag)
    one_training = ("BEGIN;\n"
                    "SELECT read_seconds, build_seconds, transfer_seconds, train_seconds, "
                    "coalesce(loss_seconds, 0), store_seconds, backend, device, final_loss "
                    "FROM gpumf_train('%s', 'user_id', 'item_id', %s, factors => %d, "
                    "iterations => %d, model => '%s');\n"
                    "COMMIT;\n") % (tbl, "'%s'" % val if val else "NULL", k, ITERS, model)
    # gpumf.warm_new_models off: no background worker reads a version into
    # shared memory while the next training is timed, and the model stays
    # never served for the cold rows of section 4
    opts = ("-c max_parallel_workers_per_gather=%d -c client_min_messages=debug1 "
            "-c gpumf.warm_new_models=off%s %s") % (
        W, " -c gpumf.unlogged_models=on" if unlogged else "", extra)
    # a fresh model each run: versions 1 .. repeat, never served (nothing shared)
    q("SELECT gpumf_drop_model('%s', if_exists => true)" % model)
    p = Psql(one_training * repeat, opts)
    res = []
    stores = re.findall(STORE_RE, p.err)
    service = "trained by the training service" in p.err
    seg = re.findall(r"gpumf: training service: .*", p.err)
    if seg:
        print("  (%s: %s)" % (model, seg[-1]), file=sys.stderr)
    for i in range(repeat):
        row = p.rows[i]
        t_begin, t_select, t_commit = p.times[3 * i: 3 * i + 3]
        d = dict(read=float(row[0]), csr=float(row[1]), transfer=float(row[2]),
                 train=float(row[3]) - float(row[4]), loss=float(row[4]), store=float(row[5]),
                 backend=row[6], device=row[7], final_loss=float(row[8]), select=t_select,
                 commit=t_commit, model=model)
        d["other"] = t_select - (d["read"] + d["csr"] + d["transfer"] + d["train"] + d["loss"] +
                                 d["store"])
        d["total"] = t_select + t_commit
        d["service"] = service
        if i < len(stores):
            d["create"], d["fill"], d["index"] = (float(x) for x in stores[i])
        res.append(d)
    return res


def bench_phases(W):
    print("### 2. gpumf_train by phase (seconds; %d iterations; each training in its own "
          "transaction, %d in one session: the first pays the session's set-up)" % (ITERS, REPEAT))
    print()
    rows, kept = [], {}
    configs = [(s, k, False) for s in SOURCES for k in FACTORS]
    configs += [(s, k, True) for (s, k) in TARGETS if s in SOURCES and k in FACTORS]
    for src, k, unlogged in configs:
        res = train_session(src, k, unlogged, W)
        kept[(src, k, unlogged)] = res
        for i, d in enumerate(res):
            target = TARGETS.get((src, k))
            rows.append([src, k, "unlogged" if unlogged else "logged", i + 1,
                         "%s / %s" % (d["backend"], d["device"]), fmt(d["read"]), fmt(d["csr"]),
                         fmt(d["transfer"]), fmt(d["train"]), fmt(d["loss"]), fmt(d["store"]),
                         fmt(d["commit"]), fmt(d["other"]), fmt(d["total"]),
                         ("< %.1f" % target) if target else "", "%.6f" % d["final_loss"]])
    table(["source", "factors", "tables", "training", "backend / device", "read", "CSR",
           "transfer", "train", "loss", "store", "commit", "other", "total", "target (GPU)",
           "final loss"], rows)
    print("read: the source into key maps and coordinates; CSR: renumbering and CSR/CSC; "
          "transfer: device set-up and copies (host <-> GPU); train: the iterations without "
          "the loss; loss: evaluating it after each iteration; store: the factor tables "
          "(created, filled, indexed, granted); commit: COMMIT; other: the rest of the "
          "statement (arguments, catalog, the CUDA module's load and device probe in a "
          "session's first training); total: the statement and its commit.")
    print()
    return kept


SERVICE_PID = ("SELECT coalesce(string_agg(pid::text, ','), 'none') FROM pg_stat_activity "
               "WHERE backend_type = 'gpumf training service'")


def bench_service(W):
    """A new session's first training: without the training service, with its
    worker cold (stopped first), and with it warm."""
    src = "1m" if "1m" in SOURCES else SOURCES[0]
    k = 512 if 512 in FACTORS else FACTORS[-1]
    print("### 2b. A new session's first training (source %s, factors %d; seconds; each case "
          "in a session of its own)" % (src, k))
    print()
    rows = []
    cases = [
        ("gpumf.training_service = off: the session sets up the GPU itself", False,
         "-c gpumf.training_service=off", None),
        ("the service's worker stopped first: the training starts it (cold)", False, "",
         "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
         "WHERE backend_type = 'gpumf training service'"),
        ("the service's worker running (warm)", False, "", None),
        ("the service's worker running (warm)", True, "", None),
        ("the service's worker running (warm), again", False, "", None),
        ("the service's worker running (warm), again", True, "", None),
    ]
    for label, unlogged, extra, before in cases:
        if before:
            q(before)
            time.sleep(1.0)
        d = train_session(src, k, unlogged, W, repeat=1, extra=extra, tag="_first")[0]
        rows.append([label, "unlogged" if unlogged else "logged",
                     "yes" if d["service"] else "no", fmt(d["read"]), fmt(d["csr"]),
                     fmt(d["transfer"]), fmt(d["train"]), fmt(d["loss"]), fmt(d["store"]),
                     fmt(d["commit"]), fmt(d["other"]), fmt(d["total"]),
                     one(SERVICE_PID)])
        q("SELECT gpumf_drop_model('%s', if_exists => true)" % d["model"])
    table(["case", "tables", "on the service", "read", "CSR", "transfer", "train", "loss",
           "store", "commit", "other", "total", "worker pid after"], rows)
    print("other: the rest of the statement; with the service it includes copying the CSR/CSC "
          "into the job's shared memory and waiting for the worker to pick it up; without it, "
          "the session's GPU start-up not hidden behind the read.")
    print()


# ------------------------------------------------------------------ 3. store vs COPY

def bench_store(kept):
    print("### 3. Storing the factors: gpumf against COPY FROM (FORMAT binary, FREEZE) of the "
          "same rows into tables of the same shape, created in one transaction, primary keys "
          "built after (seconds; gpumf: fastest of its trainings)")
    print()
    tmp = tempfile.mkdtemp(prefix="gpumf_bench_")
    os.chmod(tmp, 0o777)
    rows = []
    try:
        for (src, k, unlogged), res in kept.items():
            d = min(res, key=lambda x: x["store"])
            ut, it = q("SELECT user_table, item_table FROM gpumf.models WHERE name = '%s'"
                       % d["model"])[0]
            mb = float(one("SELECT (pg_table_size('%s') + pg_table_size('%s')) / 1e6" % (ut, it)))
            relopts = one("SELECT coalesce(array_to_string(reloptions, ', '), '') FROM pg_class "
                          "WHERE oid = '%s'::regclass" % ut)
            persist = "UNLOGGED " if unlogged else ""
            uf, itf = os.path.join(tmp, "users.bin"), os.path.join(tmp, "items.bin")
            Psql("COPY %s TO '%s' (FORMAT binary);\nCOPY %s TO '%s' (FORMAT binary);"
                 % (ut, uf, it, itf))
            with_ = " WITH (%s)" % relopts if relopts else ""
            best = None
            for _ in range(2):
                p = Psql("""DROP TABLE IF EXISTS bench_copy_users, bench_copy_items;
BEGIN;
CREATE %sTABLE bench_copy_users (LIKE %s INCLUDING STORAGE)%s;
CREATE %sTABLE bench_copy_items (LIKE %s INCLUDING STORAGE)%s;
COPY bench_copy_users FROM '%s' (FORMAT binary, FREEZE);
COPY bench_copy_items FROM '%s' (FORMAT binary, FREEZE);
ALTER TABLE bench_copy_users ADD PRIMARY KEY (key);
ALTER TABLE bench_copy_items ADD PRIMARY KEY (idx), ADD UNIQUE (key);
COMMIT;""" % (persist, ut, with_, persist, it, with_, uf, itf))
                t = p.times[1:]            # DROP first
                c = dict(create=t[1] + t[2], copy=t[3] + t[4], index=t[5] + t[6], commit=t[7])
                c["store"] = c["create"] + c["copy"] + c["index"]
                if best is None or c["store"] < best["store"]:
                    best = c
            copy_mb = float(one("SELECT (pg_table_size('bench_copy_users') + "
                                "pg_table_size('bench_copy_items')) / 1e6"))
            q("DROP TABLE bench_copy_users, bench_copy_items")
            rows.append([src, k, "unlogged" if unlogged else "logged", "%.0f" % mb,
                         fmt(d.get("fill")), fmt(best["copy"]), fmt(d.get("index")),
                         fmt(best["index"]), fmt(d["store"]), fmt(best["store"]),
                         "%.0f" % (mb / d["store"]), "%.0f" % (copy_mb / best["store"]),
                         "%.2fx" % (best["store"] / d["store"]), fmt(d["commit"]),
                         fmt(best["commit"])])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table(["source", "factors", "tables", "MB (heap + TOAST)", "gpumf fill", "COPY FROM",
           "gpumf indexes", "COPY's indexes", "gpumf store", "COPY path", "gpumf MB/s",
           "COPY MB/s", "gpumf vs COPY", "gpumf commit", "COPY commit"], rows)


# ------------------------------------------------------------------ 4. serving

def bench_serving(kept):
    print("### 4. Serving start-up: a new session's first gpumf_recommend (ms; n = 10, a user "
          "from the middle of the users table; steady: the mean over 200 users)")
    print()
    rows = []
    for (src, k, unlogged), res in kept.items():
        if unlogged or src != SOURCES[0]:
            continue
        model = res[-1]["model"]
        tbl, val, _ = TABLES[src]
        nu, mb, ut = q("SELECT n_users, n_items::float8 * factors * 4 / 1e6, user_table "
                       "FROM gpumf.models WHERE name = '%s'" % model)[0]
        user = one("SELECT key FROM %s ORDER BY key OFFSET %d LIMIT 1" % (ut, int(nu) // 2))
        call = "SELECT count(*) FROM gpumf_recommend('%s', %s, 10);\n" % (model, user)
        steady = ("SELECT count(*) FROM (SELECT key FROM %s ORDER BY key LIMIT 200) s, "
                  "LATERAL gpumf_recommend('%s', s.key, 10);\n" % (ut, model))

        def session(label, opts="", note="", of=model):
            c, st_sql = (call, steady) if of == model else (
                call.replace("'%s'" % model, "'%s'" % of), steady.replace("'%s'" % model, "'%s'" % of))
            p = Psql("SET client_min_messages = debug1;\nLOAD 'gpumf';\n" + c + c + st_sql, opts)
            _, load, first, second, st = p.times
            how = p.debug(r"gpumf: model \"[^\"]*\" version \d+ (attached|read into shared memory|"
                          r"read in [0-9.]+ s, shared|read in [0-9.]+ s, quantized)")
            how = ("?" if how is None else "attached" if how == "attached" else
                   "read into backend memory" if how.endswith("quantized") else
                   "read into shared memory")
            parts = p.debug(r"segment created in ([0-9.]+) s, table read in ([0-9.]+) s, "
                            r"int8 copy in ([0-9.]+) s")
            if parts and how == "read into shared memory":
                note = "segment %.0f, table %.0f, int8 %.0f ms" % tuple(float(x) * 1e3 for x in parts)
            rows.append([src, k, "%.0f" % float(mb), label, how, "%.1f" % (load * 1e3),
                         "%.1f" % (first * 1e3), "%.2f" % (second * 1e3),
                         "%.2f" % (st * 1e3 / 200), note])

        session("the first after the trainings (the model was never served, nor warmed: "
                "gpumf.warm_new_models = off during them)")
        session("the next")
        session("one with gpumf.shared_models = off (its own copy)", "-c gpumf.shared_models=off")
        # a retraining of the model, now that it is served: when it commits a
        # background worker reads the new version into shared memory
        v = int(one("SELECT version FROM gpumf_train('%s', 'user_id', 'item_id', %s, factors => %d, "
                    "iterations => %d, model => '%s')" % (tbl, "'%s'" % val if val else "NULL", k,
                                                         ITERS, model)))
        t0, shared = time.time(), None
        while time.time() - t0 < 30:
            if one("SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m "
                   "ON m.id = s.model_id WHERE m.name = '%s' AND s.version = %d" % (model, v)) == "1":
                shared = time.time() - t0
                break
            time.sleep(0.02)
        session("the first after a retraining of the served model",
                note="shared %s after the retraining returned" %
                ("%.2f s" % shared if shared is not None else "not within 30 s"))
        # a new model (gpumf.warm_new_models on, the default): its training's
        # commit has a background worker read it into shared memory too
        fresh = model + "_new"
        q("SELECT gpumf_drop_model('%s', if_exists => true)" % fresh)
        one("SELECT version FROM gpumf_train('%s', 'user_id', 'item_id', %s, factors => %d, "
            "iterations => %d, model => '%s')" % (tbl, "'%s'" % val if val else "NULL", k, ITERS,
                                                 fresh))
        t0, shared = time.time(), None
        while time.time() - t0 < 30:
            if one("SELECT count(*) FROM gpumf_shared_models() s JOIN gpumf.models m "
                   "ON m.id = s.model_id WHERE m.name = '%s'" % fresh) == "1":
                shared = time.time() - t0
                break
            time.sleep(0.02)
        session("the first after a new model's training (gpumf.warm_new_models = on, the default)",
                note="shared %s after the training returned" %
                ("%.2f s" % shared if shared is not None else "not within 30 s"), of=fresh)
        q("SELECT gpumf_drop_model('%s')" % fresh)
    table(["source", "factors", "item factors MB", "session", "model", "LOAD 'gpumf'",
           "first call", "second call", "steady (mean of 200)", "note"], rows)
    print("shared segments now: %s" % ", ".join(
        "model %s v%s %s MB" % (r[0], r[1], "%.0f" % (int(r[3]) / 1e6))
        for r in q("SELECT model_id, version, item_table, bytes FROM gpumf_shared_models() "
                   "ORDER BY 1, 2")))
    print()


def main():
    setup()
    W = workers_default()
    # both count(*) and gpumf get W workers: the tables ask for them
    for src in SOURCES:
        q("ALTER TABLE %s SET (parallel_workers = %d)" % (TABLES[src][0], max(W, 1)))
    print("## gpumf: the SQL path around the kernels")
    print()
    print("machine: %d cores; %s; PostgreSQL %s; wal_level %s; shared_buffers %s; "
          "max_worker_processes %s; device=%s" % (
              os.cpu_count(), one("SELECT device FROM gpumf_device_info()"),
              one("SHOW server_version"), one("SHOW wal_level"), one("SHOW shared_buffers"),
              one("SHOW max_worker_processes"), DEVICE))
    print()
    for src in SOURCES:
        tbl = TABLES[src][0]
        print("- %s: %s, %s rows, %s" % (src, tbl, one("SELECT count(*) FROM %s" % tbl),
                                         TABLES[src][2]))
    print()
    bench_read(W)
    kept = bench_phases(W)
    if DEVICE != "cpu":
        bench_service(W)
    bench_store(kept)
    bench_serving(kept)


if __name__ == "__main__":
    main()
