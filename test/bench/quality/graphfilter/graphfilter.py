#!/usr/bin/env python3
"""Low-rank (matrix-factorisation form) spectral graph filters for CF.

Every model here is served as score(u,i) = p_u . q_i with
    p_u = r_u W            (r_u binary interaction row, W: items x D)
    q_i = Q[i]             (Q: items x D)
W and Q are built from the top-d right singular vectors V of
    Rt = D_U^{-a} R D_I^{-b}
plus per-item scalars (item degree powers) and per-column scalars (h(sigma^2)).

Usage (see RESULTS.md):  python3 graphfilter.py tune gowalla
"""
import os, sys, time, json, math
os.environ.setdefault("OMP_NUM_THREADS", "1")   # shared 2-core box: 1 BLAS thread was faster
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np
import scipy.sparse as sp

DATA = os.environ.get("GF_DATA", ".data")  # LightGCN splits: DATA/<name>/{train,test}.txt
CACHE = os.environ.get("GF_CACHE", "/tmp/graphfilter-cache")
OUTDIR = os.environ.get("GF_OUT", "/tmp/graphfilter")
os.makedirs(OUTDIR, exist_ok=True)


# ----------------------------------------------------------------------------- data
def read_lists(path):
    lists = []
    with open(path) as f:
        for line in f:
            t = line.split()
            if not t:
                continue
            u = int(t[0])
            while len(lists) <= u:
                lists.append(np.zeros(0, np.int64))
            lists[u] = np.array(t[1:], dtype=np.int64)
    return lists


def to_csr(lists, n_items):
    rows = np.repeat(np.arange(len(lists)), [len(x) for x in lists])
    cols = np.concatenate(lists) if lists else np.zeros(0, np.int64)
    m = sp.csr_matrix((np.ones(len(cols), np.float32), (rows, cols)),
                      shape=(len(lists), n_items))
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


def load(ds):
    tr = read_lists(f"{DATA}/{ds}/train.txt")
    te = read_lists(f"{DATA}/{ds}/test.txt")
    n_users = max(len(tr), len(te))
    tr += [np.zeros(0, np.int64)] * (n_users - len(tr))
    te += [np.zeros(0, np.int64)] * (n_users - len(te))
    n_items = 1 + max(max((x.max() for x in tr if len(x)), default=0),
                      max((x.max() for x in te if len(x)), default=0))
    return tr, te, n_users, int(n_items)


def split_val(train_lists, frac=0.2, seed=2024):
    """hold out round(frac*n) (>=1 if n>=2) random training items per user"""
    rng = np.random.default_rng(seed)
    fit, val = [], []
    for x in train_lists:
        n = len(x)
        k = int(round(frac * n))
        if n >= 2:
            k = max(k, 1)
        k = min(k, n - 1) if n >= 1 else 0
        perm = rng.permutation(n)
        val.append(np.sort(x[perm[:k]]))
        fit.append(np.sort(x[perm[k:]]))
    return fit, val


# ----------------------------------------------------------------------------- SVD
def normalize(R, a=0.5, b=0.5):
    du = np.asarray(R.sum(1)).ravel()
    di = np.asarray(R.sum(0)).ravel()
    su = np.where(du > 0, np.maximum(du, 1) ** (-a), 0.0)
    si = np.where(di > 0, np.maximum(di, 1) ** (-b), 0.0)
    Rt = sp.diags(su) @ R.astype(np.float64) @ sp.diags(si)
    return Rt.tocsr(), du, di


def _orth(Y, passes=2):
    """CholeskyQR2 (two passes; GEMM-only, much faster than Householder QR here)"""
    import scipy.linalg as sl
    for _ in range(passes):
        G = Y.T @ Y
        try:
            L = np.linalg.cholesky(G.astype(np.float64))
        except np.linalg.LinAlgError:
            w, E = np.linalg.eigh(G.astype(np.float64))
            w = np.maximum(w, w.max() * 1e-12)
            Y = (Y @ (E / np.sqrt(w)).astype(Y.dtype))
            continue
        Y = np.ascontiguousarray(sl.solve_triangular(L, Y.T.astype(np.float64), lower=True).T.astype(Y.dtype))
    return Y


def rsvd(Rt, k, oversample=256, n_iter=5, seed=0, init=None):
    """Randomized subspace iteration (Halko et al.): Gaussian start on the item side,
    n_iter rounds of (Rt^T Rt) with CholeskyQR2 re-orthonormalisation after every
    multiply, float32 iterations, final Rayleigh-Ritz in float64.
    Returns s (k,), V (items x k) = top-k right singular vectors of Rt."""
    rng = np.random.default_rng(seed)
    n_u, n_i = Rt.shape
    l = min(k + oversample, min(n_u, n_i))
    R32 = Rt.astype(np.float32).tocsr()
    RT32 = R32.T.tocsr()
    Z0 = rng.standard_normal((n_i, l)).astype(np.float32)
    if init is not None:                        # warm start: previous (smaller) V
        Z0[:, :init.shape[1]] = init
    Z = _orth(Z0, passes=1)
    for _ in range(n_iter):
        Z = _orth(RT32 @ (R32 @ Z), passes=1)     # Z <- orth(P Z)
    Z = _orth(Z.astype(np.float64), passes=2)
    # Rayleigh-Ritz on span(Z): eig of Z^T P Z
    Y = (Rt @ Z.astype(np.float64))            # users x l
    G = Y.T @ Y                                # = Z^T Rt^T Rt Z
    w, E = np.linalg.eigh(G)
    order = np.argsort(-w)[:k]
    w, E = w[order], E[:, order]
    s = np.sqrt(np.maximum(w, 0))
    V = Z.astype(np.float64) @ E
    return s, V


def get_svd(tag, Rt, k, n_iter=5, oversample=256, init=None):
    os.makedirs(CACHE, exist_ok=True)
    fn = f"{CACHE}/{tag}_k{k}_q{n_iter}.npz"
    if os.path.exists(fn):
        z = np.load(fn)
        return z["s"], z["V"], 0.0
    t = time.time()
    s, V = rsvd(Rt, k, oversample=oversample, n_iter=n_iter, init=init)
    dt = time.time() - t
    np.savez(fn, s=s, V=V.astype(np.float32))
    return s, V.astype(np.float32), dt


# ----------------------------------------------------------------------------- filters
def cheby_coeffs(K, phi):
    """ChebyCF (Kim et al. SIGIR'25) interpolation coefficients of the
    'plateau' low-pass target on x = 1 - 2*lambda in [-1,1]."""
    j = np.arange(K + 1)
    xt = np.round(np.cos((K - j) / K * np.pi), 3) if K > 0 else np.array([0.0])
    target = np.where(xt < 0, 0.5 + 0.5 * np.abs(xt) ** phi, 0.5 - 0.5 * np.abs(xt) ** phi)
    target = np.round(target, 3)
    nodes = np.cos(((K + 1) + 0.5 - np.arange(1, K + 2)) / (K + 1) * np.pi)
    T = np.polynomial.chebyshev.chebvander(nodes, K)        # (K+1 nodes, K+1 orders)
    c = (T * target[:, None]).sum(0) * 2 / (K + 1)
    c[0] /= 2
    return c


def h_cheby(lam, K, phi):
    return np.polynomial.chebyshev.chebval(1 - 2 * lam, cheby_coeffs(K, phi))


def h_plateau(lam, phi, c=0.5):
    """exact (non-interpolated) ChebyCF target as a function of lambda; c = cutoff
    (c=0.5 is ChebyCF's: x = 1-2*lambda, 0.5 -/+ 0.5|x|^phi)."""
    up = 0.5 + 0.5 * (np.clip(lam - c, 0, None) / (1 - c)) ** phi
    lo = 0.5 - 0.5 * (np.clip(c - lam, 0, None) / c) ** phi
    return np.where(lam >= c, up, lo)


def spectral_h(cfg, lam):
    """per-column filter values h_j for eigenvalues lam_j (descending)"""
    f = cfg["h"]
    d = len(lam)
    if f == "cheby":
        h = h_cheby(lam, cfg["K"], cfg["phi"])
    elif f == "plateau":
        h = h_plateau(lam, cfg["phi"], cfg.get("c", 0.5))
    elif f == "linear":
        h = lam.copy()
    elif f == "power":
        h = lam ** cfg["p"]
    elif f == "heat":                       # exp(-t (1 - lam))
        h = np.exp(-cfg["t"] * (1 - lam))
    elif f == "none":
        h = np.zeros(d)
    else:
        raise ValueError(f)
    h = h * cfg.get("w", 1.0)
    k = cfg.get("eta", 0)
    if k:                                   # ideal pass on top-eta
        h[:k] += cfg.get("alpha", 0.0)
    return h


def build_model(cfg, s, V, di):
    """Return (W, Q) float32 with score = (r W) Q^T.
    V: items x dmax (descending singular values s), di: item degrees (train)."""
    d = cfg["d"]
    Vd = V[:, :d].astype(np.float32)
    lam = (s[:d] ** 2)
    dsafe = np.maximum(di, 1).astype(np.float64)
    kind = cfg["model"]
    if kind == "spec":
        # score = r D^-beta V diag(h) V^T D^beta     (ChebyCF form, single basis)
        beta = cfg.get("beta", 0.0)
        h = spectral_h(cfg, lam).astype(np.float32)
        keep = np.nonzero(h != 0)[0]
        # beta_in weighs the user's items, beta_out the scored ones (both beta in ChebyCF)
        pre = (dsafe ** (-cfg.get("beta_in", beta))).astype(np.float32)[:, None]
        post = (dsafe ** cfg.get("beta_out", beta)).astype(np.float32)[:, None]
        W = pre * Vd[:, keep] * h[keep][None, :]
        Q = post * Vd[:, keep]
        return W, Q
    if kind == "gfcf":
        # score = r V diag(lam) V^T  +  alpha r D^-b V_k V_k^T D^b   (GF-CF, truncated)
        k, alpha, b = cfg["k"], cfg["alpha"], cfg.get("beta", 0.5)
        pw = cfg.get("p", 1.0)
        pre = (dsafe ** (-b)).astype(np.float32)[:, None]
        post = (dsafe ** b).astype(np.float32)[:, None]
        W = np.hstack([Vd * (lam ** pw).astype(np.float32)[None, :], alpha * pre * Vd[:, :k]])
        Q = np.hstack([Vd, post * Vd[:, :k]])
        return W, Q
    if kind == "bspm":
        # BSPM-EM (final sharpening): x0 = r P + beta * r D^-1/2 V_k V_k^T D^1/2
        # score = x0 g(P), g(P) = taylor_m(exp(-T P)) (RK4 one step: m=4) restricted to top-d
        k, beta_i, T = cfg["k"], cfg["alpha"], cfg["T"]
        m = cfg.get("order", 4)
        z = -T * lam
        g = sum(z ** j / math.factorial(j) for j in range(m + 1))
        pre = (dsafe ** -0.5).astype(np.float32)[:, None]
        post = (dsafe ** 0.5).astype(np.float32)[:, None]
        Vk = Vd[:, :k]
        M = (post * Vk).T @ Vd                    # k x d : V_k^T D^1/2 V
        Wlin = Vd * (lam * g).astype(np.float32)[None, :]
        A = beta_i * (pre * Vk)                     # items x k
        Wid = A @ (M * (g - 1).astype(np.float32)[None, :])   # items x d
        W = np.hstack([Wlin + Wid, A])
        Q = np.hstack([Vd, post * Vk])
        return W, Q
    raise ValueError(kind)


# ----------------------------------------------------------------------------- evaluation
def topk_rows(S, k=20, block=128):
    """exact row-wise top-k indices (sorted by score desc) using block maxima prefilter"""
    n, m = S.shape
    nb = (m + block - 1) // block
    pad = nb * block - m
    if pad:
        S = np.hstack([S, np.full((n, pad), -np.inf, S.dtype)])
    Sb = S.reshape(n, nb, block)
    bm = Sb.max(2)
    kb = min(k, nb)
    topb = np.argpartition(-bm, kb - 1, axis=1)[:, :kb]          # n x kb blocks
    cand = Sb[np.arange(n)[:, None], topb]                     # n x kb x block
    cand = cand.reshape(n, -1)
    cidx = (topb[:, :, None] * block + np.arange(block)[None, None, :]).reshape(n, -1)
    p = np.argpartition(-cand, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(cand, p, 1)
    o = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(np.take_along_axis(cidx, p, 1), o, 1)


def evaluate(score_fn, R_seen, targets, users, k=20, chunk=2000):
    """score_fn(user_idx_array, R_rows_csr) -> dense float32 (c x items)."""
    n_items = R_seen.shape[1]
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    idcg_tab = np.concatenate([[0], np.cumsum(disc)])
    rec_sum = ndcg_sum = 0.0
    n = 0
    t_score = t_top = 0.0
    for st in range(0, len(users), chunk):
        us = users[st:st + chunk]
        Rc = R_seen[us]
        t = time.time()
        S = score_fn(us, Rc)
        t_score += time.time() - t
        t = time.time()
        rows = np.repeat(np.arange(len(us)), np.diff(Rc.indptr))
        S[rows, Rc.indices] = -np.inf
        top = topk_rows(S, k)
        t_top += time.time() - t
        T = to_csr([targets[u] for u in us], n_items).toarray().astype(bool)
        hit = np.take_along_axis(T, top, 1)
        nt = T.sum(1)
        rec_sum += (hit.sum(1) / nt).sum()
        dcg = (hit * disc[None, :]).sum(1)
        ndcg_sum += (dcg / idcg_tab[np.minimum(nt, k)]).sum()
        n += len(us)
    return dict(recall=rec_sum / n, ndcg=ndcg_sum / n, n_users=n, t_score=t_score, t_topk=t_top)


def lowrank_scorer(W, Q):
    Qt = np.ascontiguousarray(Q.T)
    def f(us, Rc):
        P = np.asarray(Rc @ W, dtype=np.float32)      # p_u = r_u W   (fold-in)
        return P @ Qt                                 # p_u . q_i
    return f


def exact_gfcf_scorer(R, Rt, di, V, alpha, k):
    """non-low-rank reference: GF-CF with the full linear filter r Rt^T Rt"""
    RtT = Rt.T.tocsr().astype(np.float32)
    Rt32 = Rt.astype(np.float32)
    dsafe = np.maximum(di, 1)
    pre = (dsafe ** -0.5).astype(np.float32)
    post = (dsafe ** 0.5).astype(np.float32)
    Vk = V[:, :k].astype(np.float32)
    def f(us, Rc):
        X = Rc.toarray()
        Y = Rt32 @ np.ascontiguousarray(X.T)          # users x c (dense)
        lin = np.ascontiguousarray((RtT @ Y).T)       # c x items
        idl = ((X * pre) @ Vk) @ (Vk.T * post)
        return lin + alpha * idl
    return f


def exact_cheby_scorer(Rt, di, V, K, phi, eta, alpha, beta):
    """non-low-rank reference: ChebyCF exactly as published (polynomial of P on full space)"""
    c = cheby_coeffs(K, phi)
    Rt32 = Rt.astype(np.float32).tocsr()
    RtT = Rt32.T.tocsr()
    dsafe = np.maximum(di, 1)
    pre = (dsafe ** -beta).astype(np.float32)
    post = (dsafe ** beta).astype(np.float32)
    Vk = V[:, :eta].astype(np.float32)
    def Lx(X):                                   # X: items x c ;  L~ X = X - 2 P X
        return X - 2 * (RtT @ (Rt32 @ X))
    def f(us, Rc):
        X = (Rc.toarray() * pre).T.copy()        # items x c
        T0, T1 = X, Lx(X)
        out = c[0] * T0 + c[1] * T1
        for j in range(2, K + 1):
            T0, T1 = T1, 2 * Lx(T1) - T0
            out += c[j] * T1
        out = out.T
        if eta and alpha:
            out += alpha * ((X.T @ Vk) @ Vk.T)
        return (out * post).astype(np.float32)
    return f
