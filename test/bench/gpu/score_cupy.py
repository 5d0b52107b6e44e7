#!/usr/bin/env python3
"""The CuPy baseline for gpumf's batch scorer: the same problem that
score_bench wrote (X, Y, the CSR of seen items), top n of every user by
CuPy's matrix product + masking the seen items + argpartition + a sort of
the n kept, in batches of users.  Times it (CUDA events, median of 5 after a
warm-up), checks its lists against gpumf's (the scores at every rank within
2e-5 relative; the items may differ only in near ties), prints a table and
"N passed, M failed".

Usage: score_cupy.py DIR [batch_users]
"""
import sys

import numpy as np

try:
    import cupy as cp
except ImportError:
    print("CuPy is not installed: no baseline")
    print("0 passed, 1 failed")
    sys.exit(1)

d = sys.argv[1]
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
nu, ni, k, n, nnz = (int(v) for v in np.fromfile(f"{d}/shape.bin", dtype=np.int64))
X = np.fromfile(f"{d}/X.bin", dtype=np.float32).reshape(nu, k)
Y = np.fromfile(f"{d}/Y.bin", dtype=np.float32).reshape(ni, k)
ptr = np.fromfile(f"{d}/seen_ptr.bin", dtype=np.int64)
idx = np.fromfile(f"{d}/seen_idx.bin", dtype=np.int32)
g_idx = np.fromfile(f"{d}/gpu_idx.bin", dtype=np.int32).reshape(nu, n)
g_score = np.fromfile(f"{d}/gpu_score.bin", dtype=np.float32).reshape(nu, n)
g_ms = float(np.fromfile(f"{d}/gpu_ms.bin", dtype=np.float64)[0])

gX = cp.asarray(X)
gY = cp.asarray(Y)
g_seen = cp.asarray(idx)
# the user of every seen entry (set-up, like uploading the CSR)
g_rows = cp.asarray(np.repeat(np.arange(nu, dtype=np.int32), np.diff(ptr)))


def topn(timed_parts=None):
    out_i = cp.empty((nu, n), dtype=cp.int32)
    out_s = cp.empty((nu, n), dtype=cp.float32)
    for u0 in range(0, nu, batch):
        u1 = min(nu, u0 + batch)
        S = gX[u0:u1] @ gY.T
        a, b = int(ptr[u0]), int(ptr[u1])
        S[g_rows[a:b] - u0, g_seen[a:b]] = -cp.inf
        part = cp.argpartition(-S, n - 1, axis=1)[:, :n]
        ps = cp.take_along_axis(S, part, axis=1)
        order = cp.argsort(-ps, axis=1)
        out_i[u0:u1] = cp.take_along_axis(part, order, axis=1)
        out_s[u0:u1] = cp.take_along_axis(ps, order, axis=1)
    return out_i, out_s


def matmul_only():
    for u0 in range(0, nu, batch):
        u1 = min(nu, u0 + batch)
        S = gX[u0:u1] @ gY.T
    return S


def timed(fn, reps=5):
    fn()
    cp.cuda.Device().synchronize()
    t = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        r = fn()
        e1.record()
        e1.synchronize()
        t.append(cp.cuda.get_elapsed_time(e0, e1))
    return float(np.median(t)), r


ms, (ci, cs) = timed(topn)
mm_ms, _ = timed(matmul_only)
ci = cp.asnumpy(ci)
cs = cp.asnumpy(cs)

passed = failed = 0
tol = 2e-5 * (1.0 + np.abs(g_score))
bad_users = np.nonzero(np.any(np.abs(cs - g_score) > tol, axis=1))[0]
swaps = int(np.sum((ci != g_idx) & (np.abs(cs - g_score) <= tol)))
ok = len(bad_users) == 0
print(f"  [{'ok' if ok else 'FAIL'}] CuPy's lists equal gpumf's for all {nu} users "
      f"(scores within 2e-5 relative at every rank; {swaps} near-tie swaps)"
      + ("" if ok else f"; {len(bad_users)} users differ, first {bad_users[0]}"))
passed += ok
failed += not ok

print()
print(f"#### Top {n} of every user, {nu} users x {ni} items, factors {k}, seen excluded "
      f"({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, CuPy {cp.__version__})")
print()
print("| implementation | GPU ms (median of 5) | gpumf speedup |")
print("|---|---|---|")
print(f"| CuPy: matmul + mask + argpartition + sort of n, batches of {batch} users | {ms:.2f} | {ms / g_ms:.1f}x |")
print(f"| CuPy: the matmuls alone | {mm_ms:.2f} | |")
print(f"| gpumf: cuBLAS sgemm + select_topk (score_bench) | {g_ms:.2f} | 1.0x |")
print()
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
