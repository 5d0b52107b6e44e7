import os
import sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graphfilter import *
ds=sys.argv[1]; k=int(sys.argv[2]); q=int(sys.argv[3]); a=float(sys.argv[4]); b=float(sys.argv[5])
tr,te,nu,ni=load(ds)
fit,val=split_val(tr)
for part,lists in [('fit',fit),('full',tr)]:
    R=to_csr(lists,ni); Rt,du,di=normalize(R,a,b)
    s,V,dt=get_svd(f'{ds}_{part}_a{a}_b{b}',Rt,k,n_iter=q,oversample=max(256,k//4))
    print(ds,part,'k',k,'q',q,'svd_seconds',round(dt,1),'s[0,255,511,1023,-1]',s[[0,255,511,1023,-1]] if k>1024 else s[[0,-1]],flush=True)
