#!/usr/bin/env python3
"""gpumf_train at scale, phase by phase beside each phase's floor, with the
memory it takes and the first serving call after the commit.  One table a run.

 1. The source: an UNLOGGED table scale_src (user_id, item_id, value) filled
    by SESSIONS parallel sessions of gpumf_synthetic, each with its own users
    (a slice of USERS) and seed, all over ITEMS items; then read once (hint
    bits) and ANALYZEd.
 2. Floors, measured on this server and machine: the read, heap bytes over
    the rate of a parallel SELECT count(*) (cores - 1 workers); the transfer,
    the CSR and CSC bytes (16 a rating, 8 a row pointer) and the starting
    factors over the host-to-device copy rate from pageable memory
    (pcie_probe.cu; pinned in brackets) and the factors over the device-to-
    host rate (the phase uploads the one and downloads the other); the store, the factor tables' heap and WAL bytes over the rate
    a logged CREATE TABLE AS of rows of the same shape (key, real[k]) writes.
 3. gpumf_train(scale_src, factors FACTORS, iterations ITERS) with
    gpumf.device = DEVICE and the training service off (the session trains),
    logged model tables: its phases from the catalog row, the whole
    statement, the backend's peak private memory (RssAnon, polled) and the GPU's peak memory use
    above its use before (nvidia-smi every 50 ms; the busiest GPU's), per interaction;
    the store's parts (creating, filling, indexing) beside the WAL at the disk's
    own rate (2 GB written and fsynced next to pg_wal). Each training starts
    after a CHECKPOINT and a sync, with no dirty pages of an earlier one.
 4. A new session's first gpumf_recommend after the commit (the statement's
    time, then a second call in the same session and the session's whole
    time from psql's start), and the next session's first call;
    with RECOMMEND_ALL=1, gpumf_recommend_all of every user (n 10) into a
    table, by phase.

Checks (a correctness run: CI's 2 cores): the model has every row, each
phase is timed, the first call returns N rows; prints "N passed, M failed".

    bash test/bench/scale/run.sh                      # CI: 200,000 rows, CPU
    source .pgbundle/device-pg.sh && DEVICE=gpu ROWS=200000000 USERS=8000000 \\
        ITEMS=1000000 SESSIONS=15 ITERS=10 bash test/bench/scale/run.sh

Settings (environment): ROWS USERS ITEMS SESSIONS FACTORS (128) ITERS (5)
DEVICE (cpu) RECOMMEND_ALL CAP_MB (gpu: gpumf.gpu_memory_limit on each GPU; a
one-GPU training that does not fit is shown refused, the others run under it) REFUSE (gpu: train again under gpumf.gpu_memory_limit = half the
predicted need, which must be refused before the upload) GPUS ("1": the GPU counts to train on, one table each, e.g. "1 2")
LEAN ("": gpumf.lean_training left on; "on off": one training each), STORE_WRITES ("": gpumf.store_writes
left at its default; e.g. "ring ring_ahead": one training each, the source read once), READ_WORKERS ("": gpumf.read_workers left at -1, as many workers as a parallel
SELECT gets; e.g. "2 15": one training each, gpumf.read_workers = 2, then 15)
RUNS (1: each training that many times, one table each: on a fresh server the
first training's store needs new WAL segment files, which gpumf.wal_ahead_workers
make during its read and training, and a retraining finds recycled)
BENCH_DB (gpumf_scale) KEEP=1 (reuse scale_src of the same size) OUT (a
directory for the table, default /tmp/gpumf_scale).
"""
import os
import re
import subprocess
import sys
import threading
import time

ROWS = int(os.environ.get("ROWS", "200000"))
USERS = int(os.environ.get("USERS", "5000"))
ITEMS = int(os.environ.get("ITEMS", "2000"))
SESSIONS = int(os.environ.get("SESSIONS", "2"))
FACTORS = int(os.environ.get("FACTORS", "128"))
ITERS = int(os.environ.get("ITERS", "5"))
DEVICE = os.environ.get("DEVICE", "cpu")
GPUS = os.environ.get("GPUS", "1").split()
READ_WORKERS = os.environ.get("READ_WORKERS", "").split() or [None]
LEAN = os.environ.get("LEAN", "").split() or [None]
STORE_WRITES = os.environ.get("STORE_WRITES", "").split() or [None]
DB = os.environ.get("BENCH_DB", "gpumf_scale")
KEEP = os.environ.get("KEEP", "") != ""
OUT = os.environ.get("OUT", "/tmp/gpumf_scale")
RECOMMEND_ALL = os.environ.get("RECOMMEND_ALL", "") != ""
REFUSE = os.environ.get("REFUSE", "") != ""
RUNS = int(os.environ.get("RUNS", "1"))
CAP_MB = int(os.environ.get("CAP_MB", "0"))
HERE = os.path.dirname(os.path.abspath(__file__))
CORES = os.cpu_count() or 2
OPTS = "-c gpumf.progress=off -c client_min_messages=warning -c gpumf.training_service=off"

passed = failed = 0
lines = []
last_err = [""]


def say(s=""):
    print(s, flush=True)
    lines.append(s)


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok %d - %s" % (passed + failed, what))
    else:
        failed += 1
        print("not ok %d - %s%s" % (passed + failed, what, ": " + detail if detail else ""))


def psql(sql, opts="", db=DB, app=None, check_rc=True):
    env = dict(os.environ, PGOPTIONS=(OPTS + " " + opts).strip())
    if app:
        env["PGAPPNAME"] = app
    p = subprocess.run(["psql", "-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", db, "-f", "-"],
                       input="\\timing on\n" + sql, capture_output=True, text=True, env=env)
    last_err[0] = p.stderr
    if check_rc and p.returncode != 0:
        sys.exit("psql failed: %s\n-- in --\n%s" % (p.stderr.strip(), sql[:2000]))
    rows, times = [], []
    for line in p.stdout.splitlines():
        m = re.match(r"^Time: ([0-9.]+) ms", line)
        if m:
            times.append(float(m.group(1)) / 1000.0)
        elif line:
            rows.append(line.split("|"))
    return rows, times


def one(sql, opts=""):
    return psql(sql, opts)[0][0][0]


def gpu_used_mb():
    try:
        # the most any one GPU uses (with gpumf.gpus > 1: each holds its share)
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return max(float(x) for x in out.split())
    except Exception:
        return None


def fmt(x, d=2):
    return "-" if x is None else "%.*f" % (d, x)


# ------------------------------------------------------------ 1. the source
have = subprocess.run(["psql", "-X", "-qAt", "-d", "postgres", "-c",
                       "SELECT 1 FROM pg_database WHERE datname = '%s'" % DB],
                      capture_output=True, text=True).stdout.strip()
if have != "1":
    subprocess.run(["createdb", DB], check=True)
psql("CREATE EXTENSION IF NOT EXISTS gpumf; ALTER EXTENSION gpumf UPDATE")  # a kept database may hold an older version
if ROWS // USERS < 20:
    sys.exit("ROWS / USERS must be at least 20 (gpumf_synthetic's min_per_user)")
size_tag = "%d %d %d" % (ROWS, USERS, ITEMS)
t_gen = None
kept = KEEP and one("SELECT coalesce((SELECT obj_description(oid, 'pg_class') FROM pg_class "
                    "WHERE relname = 'scale_src' AND relnamespace = 'public'::regnamespace), '-')") == size_tag
if not kept:
    psql("DROP TABLE IF EXISTS scale_src; "
         "CREATE UNLOGGED TABLE scale_src (user_id integer, item_id integer, value real)")
    t0 = time.time()
    procs = []
    for s in range(SESSIONS):
        u0 = USERS * s // SESSIONS
        u1 = USERS * (s + 1) // SESSIONS
        r = ROWS * (s + 1) // SESSIONS - ROWS * s // SESSIONS
        sql = ("INSERT INTO scale_src SELECT user_id + %d, item_id, value FROM gpumf_synthetic(%d, %d, %d, seed => %d)"
               % (u0, u1 - u0, ITEMS, r, 1000 + s))
        env = dict(os.environ, PGOPTIONS=OPTS)
        procs.append(subprocess.Popen(["psql", "-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-d", DB, "-c", sql],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        err = p.communicate()[1]
        if p.returncode != 0:
            sys.exit("generating the source failed: " + err)
    t_gen = time.time() - t0
    psql("ANALYZE scale_src; COMMENT ON TABLE scale_src IS '%s'" % size_tag)
n_rows = int(one("SELECT count(*) FROM scale_src"))        # also sets the hint bits
heap = int(one("SELECT pg_relation_size('scale_src')"))
workers = max(1, CORES - 1)
par = "SET max_parallel_workers_per_gather = %d; SET max_parallel_workers = %d; " % (workers, workers)
_, t = psql(par + "ALTER TABLE scale_src SET (parallel_workers = %d); SELECT count(*) FROM scale_src;" % workers)
t_count = t[-1]

# ------------------------------------------------------------ 2. the floors
copy_pageable = copy_pinned = copy_down = None
if DEVICE == "gpu":
    probe = "/tmp/gpumf_pcie_probe"
    if subprocess.run(["nvcc", "-O2", "-o", probe, os.path.join(HERE, "pcie_probe.cu")]).returncode == 0:
        out = subprocess.run([probe, "1024"], capture_output=True, text=True).stdout.split()
        if len(out) == 3:
            copy_pageable, copy_pinned, copy_down = float(out[0]), float(out[1]), float(out[2])
probe_rows = min(USERS + ITEMS, 2000000)
rows, t = psql("DROP TABLE IF EXISTS scale_write_probe; "
               "SELECT pg_current_wal_lsn() AS l0 \\gset\n"
               "CREATE TABLE scale_write_probe AS SELECT g AS key, "
               "array_fill(0.5::real, ARRAY[%d]) AS factors FROM generate_series(1, %d) g;\n"
               "SELECT pg_relation_size('scale_write_probe') + pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0');\n"
               "DROP TABLE scale_write_probe;" % (FACTORS, probe_rows))
write_rate = float(rows[-1][0]) / t[2]          # bytes a second (heap and WAL) of the CREATE TABLE AS


def disk_write_rate():
    """Bytes a second the disk of this server's WAL takes: 2 GB written and fsynced in the directory that holds
    pg_wal's target or, when pg_wal is the data directory's own, the data directory (None: not ours to write)."""
    try:
        data = os.path.realpath(one("SHOW data_directory"))
        wal_parent = os.path.dirname(os.path.realpath(os.path.join(data, "pg_wal")))
        path = os.path.join(os.path.dirname(data) if wal_parent == data else wal_parent, ".gpumf_disk_probe")
        block = os.urandom(1 << 20)
        t0 = time.time()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(2048):
                os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(path)
        return 2048 * (1 << 20) / (time.time() - t0)
    except (OSError, IndexError):
        return None


disk_rate = disk_write_rate() if DEVICE == "gpu" else None

# ------------------------------------------------------------ 3. the training, once per GPU count


def thp_mode():
    """The kernel's transparent huge page mode (the bracketed word), or '-' where it does not say."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            m = re.search(r"\[(\w+)\]", f.read())
        return m.group(1) if m else "-"
    except OSError:
        return "-"


def ratio(x, f):
    return "-" if not f else "%.1fx" % (x / f)


def refused_run(gpus, cap_opt):
    """A training expected to be refused under CAP_MB: its error and how long it took."""
    _, tr = psql("SELECT 1 FROM gpumf_train('scale_src', 'user_id', 'item_id', 'value', factors => %d, "
                 "iterations => %d, model => 'scale_model');" % (FACTORS, ITERS),
                 opts="-c gpumf.device=gpu -c gpumf.gpus=%d%s" % (gpus, cap_opt), check_rc=False)
    msg = [l for l in last_err[0].splitlines() if "ERROR" in l]
    return (tr[0] if tr else None), (msg[0] if msg else last_err[0].strip()[:300])


def run_one(gpus, read_workers=None, lean=None, store_writes=None, run=1):
    cap_opt = " -c gpumf.gpu_memory_limit=%d" % CAP_MB if CAP_MB else ""
    if store_writes is not None:
        cap_opt += " -c gpumf.store_writes=%s" % store_writes
    if lean is not None:
        cap_opt += " -c gpumf.lean_training=%s" % lean
    if read_workers is not None:
        cap_opt += " -c gpumf.read_workers=%d -c max_parallel_workers=%d" % (read_workers, max(8, read_workers))
    if CAP_MB and gpus == 1:
        # the table does not fit one GPU under the cap: refused before the upload, nothing else runs
        t_ref, msg = refused_run(1, cap_opt)
        say("### one GPU under gpumf.gpu_memory_limit = %d MB" % CAP_MB)
        say()
        say("Refused after %s s: `%s`" % (fmt(t_ref), msg))
        say()
        check("one GPU under the cap: refused before the upload", "needs about" in msg and "GPU memory" in msg, msg)
        return
    expect_refusal = False
    # every training starts with no dirty pages behind it (the source's, an earlier training's tables),
    # so that the kernel's write-back of one run does not land in the next one's store
    # (each trains a new model: the last one's tables are dropped first, so a run of several trainings
    # holds one model's tables on the disk, not three)
    psql("SELECT gpumf_drop_model('scale_model', if_exists => true); CHECKPOINT")
    # a CHECKPOINT leaves an unlogged table's dirty buffers in shared buffers (the source's, up to
    # shared_buffers of them just after its generation): the training's read would write them out, and the
    # kernel write them back during its store. CREATE DATABASE ... STRATEGY FILE_COPY (PostgreSQL 15 and
    # later) first asks for a checkpoint that writes every dirty buffer, unlogged ones too; where it fails
    # (an older server, no CREATEDB) the run goes on as before
    psql("DROP DATABASE IF EXISTS gpumf_scale_flush; CREATE DATABASE gpumf_scale_flush STRATEGY = FILE_COPY; "
         "DROP DATABASE gpumf_scale_flush", db="postgres", check_rc=False)
    os.sync()
    # the WAL's segment files there are now: a training that writes more WAL than they hold creates (and
    # zero-fills) new ones as it goes, which a retraining finds recycled (pg_ls_waldir: superuser or pg_monitor)
    wal_files = psql("SELECT count(*), coalesce(sum(size), 0) FROM pg_catalog.pg_ls_waldir()", check_rc=False)[0]
    # ------------------------------------------------------------ 3. the training
    gpu0 = gpu_used_mb() if DEVICE == "gpu" else None
    peak = {"gpu": gpu0, "rss": None}
    done = threading.Event()


    def watch():
        pid = None
        while not done.is_set():
            if pid is None:
                r = subprocess.run(["psql", "-X", "-qAt", "-d", DB, "-c",
                                    "SELECT pid FROM pg_stat_activity WHERE application_name = 'gpumf_scale_train'"],
                                   capture_output=True, text=True).stdout.strip()
                pid = int(r) if r.isdigit() else None
            if pid:
                try:
                    with open("/proc/%d/status" % pid) as f:
                        st = f.read()
                    # private memory (RssAnon), polled: VmHWM also counts the
                    # shared buffers the scan touched
                    m = re.search(r"RssAnon:\s+(\d+) kB", st)
                    if m:
                        peak["rss"] = max(peak["rss"] or 0, int(m.group(1)) * 1024)
                    m = re.search(r"VmHWM:\s+(\d+) kB", st)
                    if m:
                        peak["hwm"] = max(peak.get("hwm") or 0, int(m.group(1)) * 1024)
                except OSError:
                    pass
            if DEVICE == "gpu":
                g = gpu_used_mb()
                if g is not None:
                    peak["gpu"] = max(peak["gpu"] or 0, g)
            time.sleep(0.05)


    # a daemon: an ERROR below (psql raises) must not leave the process waiting for it
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    try:
        rows, t = psql("SELECT pg_current_wal_lsn() AS l0 \\gset\n"
                       "SELECT read_seconds, build_seconds, transfer_seconds, train_seconds, store_seconds, nnz, n_users, n_items "
                       "FROM gpumf_train('scale_src', 'user_id', 'item_id', 'value', factors => %d, iterations => %d, "
                       "model => 'scale_model');\n"
                       "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0');\n"
                       "SELECT pg_sleep(0.5);" % (FACTORS, ITERS),
                       opts="-c gpumf.device=%s -c gpumf.unlogged_models=off -c client_min_messages=debug1 -c gpumf.gpus=%d%s"
                       % (DEVICE, gpus, cap_opt), check_rc=not expect_refusal,
                       app="gpumf_scale_train")
    finally:
        done.set()
    w.join()
    # the training's messages (DEBUG1 and up), for what the tables leave out
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "train-%d-gpus-%s.log" % (gpus, "refused" if expect_refusal else "run")), "a") as f:
        f.write(last_err[0])
    # the GPU memory the training predicted before its upload (gpumf_check_gpu_memory's DEBUG1 line)
    m = re.search(r"training needs about ([0-9]+) MB of GPU memory \(matrices ([0-9]+), factors ([0-9]+), solver ([0-9]+)\)",
                  last_err[0])
    predicted = [float(x) * 1048576 for x in m.groups()] if m else None
    # the backend's private memory after each phase (train.c's DEBUG1 line)
    m = re.search(r"private memory \(MB\) after the read (-?[0-9]+), the matrix (-?[0-9]+), its transpose (-?[0-9]+), "
                  r"the upload (-?[0-9]+), the training (-?[0-9]+), the store (-?[0-9]+)", last_err[0])
    mem_after = [float(x) * 1048576 for x in m.groups()] if m else None
    # the store's parts (model_store.c's DEBUG1 line)
    m = re.search(r"factor tables created in ([0-9.]+) s, filled in ([0-9.]+) s \(users ([0-9.]+) s, items ([0-9.]+) s\), "
                  r"indexed in ([0-9.]+) s \(users ([0-9.]+) s, items ([0-9.]+) s\)", last_err[0])
    store_parts = [float(x) for x in m.groups()] if m else None
    # the parallel read's parts (source_scan.c's DEBUG1 line)
    m = re.search(r"the parallel read: ([0-9.]+) s, the leader ([0-9.]+) s merging, ([0-9.]+) s waiting, ([0-9.]+) s "
                  r"numbering the keys and translating; a worker ([0-9.]+) s on average, ([0-9.]+) s of it sending",
                  last_err[0])
    read_parts = [float(x) for x in m.groups()] if m else None
    # the matrix's parts (source.c's DEBUG1 line)
    m = re.search(r"the matrix: keys sorted in ([0-9.]+) s, rows renumbered in ([0-9.]+) s, CSR built in ([0-9.]+) s",
                  last_err[0])
    csr_parts = [float(x) for x in m.groups()] if m else None
    m = re.search(r"with a scan of its own, ([0-9]+) parallel workers", last_err[0])
    launched = int(m.group(1)) if m else None
    r = rows[0]
    ph = [float(x) for x in r[:5]]
    nnz, n_users, n_items = int(r[5]), int(r[6]), int(r[7])
    t_stmt = t[1]
    wal = float(rows[1][0])
    fact_bytes = int(one("SELECT pg_total_relation_size(user_table::regclass) + pg_total_relation_size(item_table::regclass) "
                         "FROM gpumf.models WHERE name = 'scale_model'"))
    device_name = one("SELECT device FROM gpumf.models WHERE name = 'scale_model'")

    # ------------------------------------------------------------ 4. serving
    user = one("SELECT user_id FROM scale_src LIMIT 1")
    user2 = one("SELECT user_id FROM scale_src WHERE user_id <> %s LIMIT 1" % user)
    w0 = time.time()
    r1, t1 = psql("SELECT count(*) FROM gpumf_recommend('scale_model', %s, 10);\n"
                  "SELECT count(*) FROM gpumf_recommend('scale_model', %s, 10)" % (user, user2))
    w1 = time.time() - w0
    r2, t2 = psql("SELECT count(*) FROM gpumf_recommend('scale_model', %s, 10)" % user)

    ra = None
    if RECOMMEND_ALL:
        rows_ra, t_ra = psql("DROP TABLE IF EXISTS scale_recs;\n"
                             "SELECT scored_users, rows_written, read_seconds, transfer_seconds, compute_seconds, "
                             "write_seconds FROM gpumf_recommend_all('scale_model', 10, 'scale_recs');",
                             opts="-c gpumf.device=%s" % DEVICE)
        ra = [float(x) for x in rows_ra[0]] + [t_ra[-1]]
        psql("DROP TABLE scale_recs")

    # ------------------------------------------------------------ the table
    os.makedirs(OUT, exist_ok=True)
    read_floor = t_count
    csr_bytes = 16.0 * nnz + 8.0 * (n_users + n_items + 2)
    fac = 4.0 * FACTORS * (n_users + n_items)
    # the transfer phase uploads the CSR, the CSC and the starting factors and downloads the factors
    transfer_floor = ((csr_bytes + fac) / (copy_pageable * 1e9) + fac / (copy_down * 1e9)
                      if copy_pageable and copy_down else None)
    store_floor = (fact_bytes + wal) / write_rate
    # what must be on disk when the commit returns: the WAL, at the disk's own rate (written and fsynced)
    disk_floor = wal / disk_rate if disk_rate else None


    say("### gpumf_train at scale: %s rows (%s users x %s items), factors %d, %d iterations, %s (%s), %d cores%s%s"
        % (format(n_rows, ","), format(n_users, ","), format(n_items, ","), FACTORS, ITERS, DEVICE, device_name, CORES,
           ", gpumf.gpu_memory_limit %d MB" % CAP_MB if CAP_MB else "",
           ", gpumf.lean_training %s" % lean if lean is not None else "") +
        (", gpumf.store_writes %s" % store_writes if store_writes is not None else "") +
        (", run %d of %d" % (run, RUNS) if RUNS > 1 else ""))
    say()
    say("Source: UNLOGGED, %.1f GB of heap, made by %d sessions%s; model tables logged (wal_level %s); "
        "read by the backend and %s parallel workers (gpumf.read_workers %s)."
        % (heap / 1e9, SESSIONS, " in %.1f s" % t_gen if t_gen else " (kept)", one("SHOW wal_level"),
           "?" if launched is None else launched, "-1" if read_workers is None else read_workers))
    say()
    say("Server: shared_buffers %s, wal_buffers %s, max_wal_size %s, checkpoint_timeout %s; transparent huge pages: %s; "
        "pg_wal before the training: %s."
        % (one("SHOW shared_buffers"), one("SHOW wal_buffers"), one("SHOW max_wal_size"), one("SHOW checkpoint_timeout"),
           thp_mode(), "%s segment files, %.1f GB" % (wal_files[0][0], int(wal_files[0][1]) / 1e9)
           if wal_files and len(wal_files[0]) == 2 else "-"))
    say()
    say("| phase | seconds | floor s | what the floor is | phase / floor |")
    say("|---|---|---|---|---|")
    say("| read | %.2f | %.2f | %.1f GB of heap at a parallel count(*)'s rate (%d workers: %.2f GB/s) | %s |"
        % (ph[0], read_floor, heap / 1e9, workers, heap / 1e9 / t_count, ratio(ph[0], read_floor)))
    if read_parts:
        say("| read: the leader merging, waiting, numbering the keys; a worker (of it sending) | %s / %s / %s; %s (%s) | - | | - |"
            % tuple(fmt(x) for x in read_parts[1:]))
    say("| CSR/CSC | %.2f | - | (none measured) | - |" % ph[1])
    if csr_parts:
        say("| CSR/CSC: keys sorted, rows renumbered, CSR built (the rest: checks, the transpose's counts) | %s | - | | - |"
            % " / ".join(fmt(x) for x in csr_parts))
    say("| transfer | %.2f | %s | %.1f GB of CSR and CSC and %.1f GB of factors up at %s GB/s from pageable memory "
        "(pinned: %s GB/s), the factors down at %s GB/s | %s |"
        % (ph[2], fmt(transfer_floor), csr_bytes / 1e9, fac / 1e9, fmt(copy_pageable), fmt(copy_pinned),
           fmt(copy_down), ratio(ph[2], transfer_floor)))
    say("| train | %.2f | - | | - |" % ph[3])
    say("| store | %.2f | %.2f | %.2f GB of factor tables and %.2f GB of WAL at a logged CREATE TABLE AS's %.2f GB/s | %s |"
        % (ph[4], store_floor, fact_bytes / 1e9, wal / 1e9, write_rate / 1e9, ratio(ph[4], store_floor)))
    if store_parts:
        say("| store: create, fill users, fill items, index (users, items) | %s (%s, %s) | %s | the WAL (fsynced before the commit returns) at the disk's "
            "rate: %s GB/s written and fsynced | %s |"
            % (" / ".join(fmt(x) for x in (store_parts[0], store_parts[2], store_parts[3], store_parts[4])),
               fmt(store_parts[5]), fmt(store_parts[6]), fmt(disk_floor), fmt(disk_rate / 1e9 if disk_rate else None), ratio(ph[4], disk_floor)))
    say("| whole statement | %.2f | %.2f | the floors' sum | %s |"
        % (t_stmt, read_floor + (transfer_floor or 0) + store_floor,
           ratio(t_stmt, read_floor + (transfer_floor or 0) + store_floor)))
    say()
    rss = peak["rss"]
    gpu = (peak["gpu"] - gpu0) * 1048576 if DEVICE == "gpu" and peak["gpu"] is not None and gpu0 is not None else None
    say("| memory | peak | bytes an interaction | beside |")
    say("|---|---|---|---|")
    hwm = peak.get("hwm")
    say("| backend (private memory, RssAnon every 50 ms) | %s GB | %s | VmHWM %s GB (shared buffers touched included) |"
        % (fmt(rss / 1e9 if rss else None), fmt(rss / nnz if rss else None, 1), fmt(hwm / 1e9 if hwm else None)))
    say("| GPU (nvidia-smi, above %s MB before) | %s GB | %s | factors %.2f GB: %s bytes an interaction without them |"
        % (fmt(gpu0, 0), fmt(gpu / 1e9 if gpu else None), fmt(gpu / nnz if gpu else None, 1), fac / 1e9,
           fmt((gpu - fac) / nnz if gpu else None, 1)))
    if mem_after:
        say("| backend after each phase: read, matrix, transpose, upload, training (factors downloaded), store | %s GB | %s | |"
            % (" / ".join(fmt(x / 1e9) for x in mem_after), " / ".join(fmt(x / nnz, 1) for x in mem_after)))
    if predicted:
        say("| GPU, predicted before the upload (gm_mf_device_memory and the libraries' margin) | %s GB | %s | "
            "matrices %.2f GB (%.1f bytes an interaction), factors %.2f GB, solver %.2f GB |"
            % (fmt(predicted[0] / 1e9), fmt(predicted[0] / nnz, 1), predicted[1] / 1e9, predicted[1] / nnz,
               predicted[2] / 1e9, predicted[3] / 1e9))
    refusal = None
    if DEVICE == "gpu" and predicted and REFUSE and gpus == 1 and not CAP_MB:
        # the same training under a cap of half its need: refused before the upload, after the read and the matrices
        limit_mb = int(predicted[0] / 2 / 1048576)
        _, tr = psql("SELECT 1 FROM gpumf_train('scale_src', 'user_id', 'item_id', 'value', factors => %d, "
                     "iterations => %d, model => 'scale_refused');" % (FACTORS, ITERS),
                     opts="-c gpumf.device=gpu -c gpumf.gpus=%d -c gpumf.gpu_memory_limit=%d" % (gpus, limit_mb),
                     check_rc=False)
        msg = [l for l in last_err[0].splitlines() if "ERROR" in l]
        refusal = (limit_mb, tr[0] if tr else None, msg[0] if msg else last_err[0].strip()[:300])
        say()
        say("Refusal: the same training with gpumf.gpu_memory_limit = %d MB ended after %s s: `%s`"
            % (limit_mb, fmt(refusal[1]), refusal[2]))
    say()
    say("| serving | ms |")
    say("|---|---|")
    say("| a new session's first gpumf_recommend after the commit (the statement) | %.1f |" % (t1[0] * 1000))
    say("| the same session's second call (another user) | %.1f |" % (t1[1] * 1000))
    say("| the first session from psql's start to its end (connecting, both calls) | %.1f |" % (w1 * 1000))
    say("| the next session's first call | %.1f |" % (t2[0] * 1000))
    say()
    if ra:
        say("| gpumf_recommend_all(n 10) | users | rows written | read s | transfer s | compute s | write s | whole s | users a second |")
        say("|---|---|---|---|---|---|---|---|---|")
        say("| every user | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s |"
            % (format(int(ra[0]), ","), format(int(ra[1]), ","), ra[2], ra[3], ra[4], ra[5], ra[6],
               format(int(ra[0] / ra[6]), ",")))
        say()

    check("the model has every row of the source", nnz == n_rows, "nnz %d, rows %d" % (nnz, n_rows))
    check("every phase is timed", all(x >= 0 for x in ph) and t_stmt >= sum(ph) * 0.99,
          "phases %s, statement %.3f" % (ph, t_stmt))
    check("the first call after the commit returns 10 rows", r1[0][0] == "10", str(r1))
    check("the backend's peak memory was read", rss is not None and rss > 0)
    check("the floors are measured", read_floor > 0 and store_floor > 0 and (DEVICE != "gpu" or transfer_floor))
    if DEVICE == "gpu":
        check("the training predicted its GPU memory before the upload", predicted is not None)
    if refusal:
        check("under a cap of half the need the training is refused before the upload",
              "needs about" in refusal[2] and "GPU memory" in refusal[2] and
              one("SELECT count(*) FROM gpumf.models WHERE name = 'scale_refused'") == "0", refusal[2])
    if RECOMMEND_ALL:
        check("gpumf_recommend_all wrote 10 rows for every user", ra and int(ra[0]) == n_users and int(ra[1]) == 10 * n_users,
              str(ra))


for g in GPUS:
    for rw in READ_WORKERS:
        for ln in LEAN:
            for sw in STORE_WRITES:
                for run in range(1, RUNS + 1):
                    run_one(int(g), None if rw is None else int(rw), ln, sw, run)
with open(os.path.join(OUT, "scale_bench.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("%d passed, %d failed" % (passed, failed))
sys.exit(0 if failed == 0 else 1)
