import os
import sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graphfilter import *
ds=sys.argv[1]; part=sys.argv[2]; k=int(sys.argv[3]); q=int(sys.argv[4])
tr,te,nu,ni=load(ds); fit,val=split_val(tr)
R=to_csr(tr if part=='full' else fit,ni); Rt,du,di=normalize(R)
z=np.load(f'{CACHE}/{ds}_{part}_a0.5_b0.5_k2048_q6.npz')
s,V,dt=get_svd(f'{ds}_{part}_a0.5_b0.5',Rt,k,n_iter=q,oversample=k//4,init=z['V'])
print(ds,part,'k',k,'q',q,'warm-start from k2048; svd_seconds',round(dt,1),'s',s[[0,255,511,1023,2047,-1]],'agree-with-2048 max|ds|',np.abs(s[:2048]-z['s']).max(),flush=True)
