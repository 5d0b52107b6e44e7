import json, sys
import os
rows=[json.loads(l) for l in open(sys.argv[1])]
def cfgstr(c):
    return ' '.join(f'{k}={v}' for k,v in c.items() if k not in ('name','model','kmax','q'))
print('| # | mode | model | config | d | D (dot dim) | users | recall@20 | NDCG@20 | score s | top-k s |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for i,r in enumerate(rows):
    c=r['cfg']
    print(f"| {i} | {r['mode']} | {c['name']} | {cfgstr({k:v for k,v in c.items() if k!='d'})} | {c.get('d','full')} | {r.get('D') or 'full-rank'} | {r['n_users']} | {r['recall']:.4f} | {r['ndcg']:.4f} | {r.get('t_score')} | {r.get('t_topk')} |")
