"""graph_filter's low-rank ChebyCF blended with an iALS model, both as factor models.

    score(u, i) = a * (p_u / |p_u|) . q_i + (1 - a) * (x_u / |x_u|) . y_i

p_u, q_i: the low-rank ChebyCF of graphfilter.py (ChebyCF's constants, d factors, from the
cached SVD of run_svd.py); x_u, y_i: an iALS model trained by gpumf_train on the same rows and
exported with COPY (one "key<TAB>{f1,f2,...}" line a user or an item, keys = the 0-based user
and item numbers of graphfilter.load).  Each part is normalized per user, so the blend is one
factor model: p'_u = [a p_u/|p_u|, (1-a) x_u/|x_u|], q'_i = [q_i, y_i].

    python3 ensemble.py DS rows DIR           # DIR/fit.tsv, DIR/full.tsv: the rows (user, item) to train iALS on
    python3 ensemble.py DS val|test WEIGHTS IALS_PREFIX [NVAL] [D] [KMAX]
        WEIGHTS: comma-separated a values (1: graph_filter alone, 0: iALS alone)
        IALS_PREFIX: IALS_PREFIX_users.txt and IALS_PREFIX_items.txt, trained on the fit
                     split for 'val' and on the whole training part for 'test'
        D: the graph filter's factors (4096); KMAX: the cached SVD's k (max(D, 4096))
"""
import os
import sys, json; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graphfilter import *

ds, mode = sys.argv[1], sys.argv[2]
if mode == 'rows':
    tr, te, nu, ni = load(ds)
    fit, val = split_val(tr)
    for name, lists in [('fit', fit), ('full', tr)]:
        with open(os.path.join(sys.argv[3], f'{name}.tsv'), 'w') as f:
            for u, l in enumerate(lists):
                for i in l:
                    f.write(f'{u}\t{i}\n')
    sys.exit(0)
weights, prefix = sys.argv[3], sys.argv[4]
nval = int(sys.argv[5]) if len(sys.argv) > 5 else 8000
d = int(sys.argv[6]) if len(sys.argv) > 6 else 4096
tr, te, nu, ni = load(ds)
fit, val = split_val(tr)
lists, targets, part = (fit, val, 'fit') if mode == 'val' else (tr, te, 'full')
R = to_csr(lists, ni)
Rt, du, di = normalize(R)
kmax = int(sys.argv[7]) if len(sys.argv) > 7 else max(d, 4096)  # the SVD run_svd.py cached; the model keeps its first d columns
s, V, _ = get_svd(f'{ds}_{part}_a0.5_b0.5', Rt, kmax, n_iter=6, oversample=max(256, kmax // 4))
cfg = dict(model='spec', h='cheby', K=8, phi=1.5, eta=512, alpha=0.2, beta=0.4, d=d)
W, Q = build_model(cfg, s, V, di)


def load_factors(fn, n):
    F = None
    for line in open(fn):
        k, arr = line.rstrip('\n').split('\t')
        v = np.array(arr.strip('{}').split(','), dtype=np.float32)
        if F is None:
            F = np.zeros((n, len(v)), np.float32)
        F[int(k)] = v
    return F


X = load_factors(f'{prefix}_users.txt', nu)
Y = load_factors(f'{prefix}_items.txt', ni)
Qt, Yt = np.ascontiguousarray(Q.T), np.ascontiguousarray(Y.T)
users = np.array([u for u in range(nu) if len(targets[u])])
if mode == 'val' and nval < len(users):
    users = np.sort(np.random.default_rng(0).choice(users, nval, replace=False))
out = open(f'{OUTDIR}/results_{ds}.jsonl', 'a')
for a in [float(x) for x in weights.split(',')]:
    def score(us, Rc):
        P = np.asarray(Rc @ W, dtype=np.float32)
        P /= np.maximum(np.linalg.norm(P, axis=1, keepdims=True), 1e-12)
        S = a * (P @ Qt)
        if a < 1:
            Xu = X[us] / np.maximum(np.linalg.norm(X[us], axis=1, keepdims=True), 1e-12)
            S += (1 - a) * (Xu @ Yt)
        return S
    r = evaluate(score, R, targets, users)
    rec = dict(ds=ds, mode=mode, n_users=len(users), cfg=dict(name='blend_chebycf_ials', d=d, a=a,
               ials=os.path.basename(prefix), ials_factors=int(X.shape[1])),
               D=int(Q.shape[1] + X.shape[1]), recall=round(r['recall'], 5), ndcg=round(r['ndcg'], 5))
    print(json.dumps(rec), flush=True)
    out.write(json.dumps(rec) + '\n'); out.flush()
