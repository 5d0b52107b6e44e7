"""non-low-rank references (exact GF-CF / exact ChebyCF with full-spectrum polynomial)"""
import os
import sys, json; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graphfilter import *
ds, mode, which = sys.argv[1], sys.argv[2], sys.argv[3]
nval = int(sys.argv[4]) if len(sys.argv) > 4 else 8000
tr, te, nu, ni = load(ds)
fit, val = split_val(tr)
lists, targets, part = (fit, val, 'fit') if mode == 'val' else (tr, te, 'full')
R = to_csr(lists, ni); Rt, du, di = normalize(R)
s, V, _ = get_svd(f'{ds}_{part}_a0.5_b0.5', Rt, 2048, n_iter=6, oversample=512)
users = np.array([u for u in range(nu) if len(targets[u])])
if nval < len(users):
    users = np.sort(np.random.default_rng(0).choice(users, nval, replace=False))
if which == 'gfcf':
    cfg = dict(name='gfcf_exact', k=256, alpha=0.3); f = exact_gfcf_scorer(R, Rt, di, V, 0.3, 256)
else:
    cfg = dict(name='chebycf_exact', K=8, phi=1.5, eta=512, alpha=0.2, beta=0.4)
    f = exact_cheby_scorer(Rt, di, V, 8, 1.5, 512, 0.2, 0.4)
r = evaluate(f, R, targets, users, chunk=1000)
rec = dict(ds=ds, mode=mode, n_users=len(users), cfg=cfg, D=None, recall=round(r['recall'], 5), ndcg=round(r['ndcg'], 5),
           t_score=round(r['t_score'], 1), t_topk=round(r['t_topk'], 1))
print(json.dumps(rec), flush=True)
open(f'{OUTDIR}/results_{ds}.jsonl', 'a').write(json.dumps(rec) + '\n')
