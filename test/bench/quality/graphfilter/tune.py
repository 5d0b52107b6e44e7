"""validation tuning / test evaluation driver.  python3 tune.py DS STAGE MODE(val|test) ['[cfg,...]' json]"""
import os
import sys, json; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graphfilter import *
ds, mode = sys.argv[1], sys.argv[2]
cfgs = json.loads(open(sys.argv[3]).read()) if sys.argv[3].endswith('.json') else json.loads(sys.argv[3])
nval = int(sys.argv[4]) if len(sys.argv) > 4 else 8000
a, b = 0.5, 0.5
tr, te, nu, ni = load(ds)
fit, val = split_val(tr)
if mode == 'val':
    lists, targets, part = fit, val, 'fit'
else:
    lists, targets, part = tr, te, 'full'
R = to_csr(lists, ni)
cache = {}
users_all = np.array([u for u in range(nu) if len(targets[u])])
if mode == 'val' and nval < len(users_all):
    users = np.sort(np.random.default_rng(0).choice(users_all, nval, replace=False))
else:
    users = users_all
out = open(f'{OUTDIR}/results_{ds}.jsonl', 'a')
for cfg in cfgs:
    ca, cb = cfg.get('a', a), cfg.get('b', b)
    key = (ca, cb, cfg.get('kmax', 2048))
    if key not in cache:
        Rt, du, di = normalize(R, ca, cb)
        kmax = cfg.get('kmax', 2048)
        s, V, dt = get_svd(f'{ds}_{part}_a{ca}_b{cb}', Rt, kmax, n_iter=cfg.get('q', 6), oversample=max(256, kmax // 4))
        cache[key] = (Rt, di, s, V)
    Rt, di, s, V = cache[key]
    t0 = time.time()
    W, Q = build_model(cfg, s, V, di)
    tb = time.time() - t0
    r = evaluate(lowrank_scorer(W, Q), R, targets, users)
    rec = dict(ds=ds, mode=mode, n_users=len(users), cfg=cfg, D=int(Q.shape[1]), recall=round(r['recall'], 5),
               ndcg=round(r['ndcg'], 5), t_build=round(tb, 1), t_score=round(r['t_score'], 1), t_topk=round(r['t_topk'], 1))
    print(json.dumps(rec), flush=True)
    out.write(json.dumps(rec) + '\n'); out.flush()
