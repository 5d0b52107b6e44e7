"""
linalg_cupy.py: the baseline a GPU user would run instead of gpumf's PCG:
CuPy's cupyx.scipy.sparse.linalg.cg with a Jacobi preconditioner given as a
LinearOperator, on the matrix and right-hand side linalg_bench wrote
(int64 n, nnz; int32 indptr; int32 indices; float64 values; float64 b).

Prints "cupyx fp64 ms_per_iteration X" and the same for fp32: the
difference of two fixed-length runs (tolerance 0, so every iteration runs),
timed with device synchronisation, after a warm-up.
Usage: python3 linalg_cupy.py matrix.bin
"""
import inspect
import sys
import time

import numpy as np
import cupy as cp
import cupyx.scipy.sparse as sps
import cupyx.scipy.sparse.linalg as spl


def main(path):
    with open(path, "rb") as f:
        n, nnz = (int(v) for v in np.fromfile(f, dtype=np.int64, count=2))
        indptr = np.fromfile(f, dtype=np.int32, count=n + 1)
        indices = np.fromfile(f, dtype=np.int32, count=nnz)
        data = np.fromfile(f, dtype=np.float64, count=nnz)
        b = np.fromfile(f, dtype=np.float64, count=n)
    params = inspect.signature(spl.cg).parameters
    tol_kw = "rtol" if "rtol" in params else "tol"
    print(f"cupy {cp.__version__}, n {n}, nnz {nnz}, tolerance keyword {tol_kw}")
    for tag, dt in (("fp64", np.float64), ("fp32", np.float32)):
        A = sps.csr_matrix((cp.asarray(data.astype(dt)), cp.asarray(indices),
                            cp.asarray(indptr)), shape=(n, n))
        dinv = (1.0 / A.diagonal()).astype(dt)
        M = spl.LinearOperator((n, n), matvec=lambda x, d=dinv: d * x, dtype=dt)
        bb = cp.asarray(b.astype(dt))

        def run(iterations):
            cp.cuda.runtime.deviceSynchronize()
            t = time.perf_counter()
            kw = {tol_kw: 0.0, "atol": 0.0, "maxiter": iterations, "M": M}
            spl.cg(A, bb, **kw)
            cp.cuda.runtime.deviceSynchronize()
            return time.perf_counter() - t

        run(20)
        short = min(run(20) for _ in range(2))
        long_ = min(run(220) for _ in range(2))
        ms = (long_ - short) * 1e3 / 200
        print(f"cupyx {tag} ms_per_iteration {ms:.4f}")
        del A, M, bb, dinv
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main(sys.argv[1])
