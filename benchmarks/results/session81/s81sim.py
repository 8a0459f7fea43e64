"""Session 81: a Python model of the index math of next-period-merge-passes.diff (no GPU): the stats column merge
with its passes (the first a store, the slots rotated a half-warp) and the merge phase (PERIOD_MCOLS columns an item,
R = T / 8 rows, the tree over rows [h, min(2h, R))), each place and column checked against a direct sum over odd and
even inner from 64 to 4097, V = 4 and 8, every chunk, 1 to 130 bands. With R fixed at 64 (the form call 2 ran) the
merge reads rows no thread wrote wherever T < 512, as the GPU tests found."""
import random
def stats_passes(inner, V, T, Q, chunk):
    span = min(T, Q - chunk*T)*V
    L = min(inner, T*V)
    passes = (span + inner - 1)//inner
    val = [random.random() for _ in range(span)]
    sh = [None]*L
    for i in range(span, L): sh[i] = 0.0
    for p in range(passes):
        for tid in range(T):
            valid = chunk*T + tid < Q
            el0 = tid*V; p0 = el0//inner; cut = (p0+1)*inner - el0
            rot = (tid & 15)//(16//V)
            if valid and (p == p0 or p == p0+1):
                for u in range(V):
                    j = (u+rot) & (V-1)
                    if (j < cut) == (p == p0):
                        at = el0 + j - p*inner
                        if p == 0: assert sh[at] is None; sh[at] = val[el0+j]
                        else: sh[at] += val[el0+j]
    want = [0.0]*L
    for el in range(span): want[el % inner] += val[el]
    assert all(s is not None for s in sh)
    assert max(abs(a-b) for a,b in zip(sh,want)) < 1e-9, (inner,V,T,Q,chunk)
def merge(inner, V, T, chunks, bands, MC=8, B=4):
    L = min(inner, T*V); R = T//MC; parts = bands*chunks
    pairs = [[random.random() for _ in range(L)] for _ in range(parts)]
    blocks = (inner + MC - 1)//MC
    for blk in range(blocks):
        sh = {}
        for tid in range(T):
            tx, ty = tid % MC, tid // MC
            col = blk*MC + tx
            acc = 0.0
            q0 = ty
            while col < inner and q0 < parts:
                for u in range(B):
                    q = q0 + u*R
                    lc = col - (q % chunks)*T*V % inner
                    if lc < 0: lc += inner
                    if q < parts and lc < L: acc += pairs[q][lc]
                q0 += B*R
            sh[(ty,tx)] = acc
        h = 32
        while h > 0:
            for ty in range(min(h, R)):
                if ty + h < R:
                    for tx in range(MC): sh[(ty,tx)] += sh[(ty+h,tx)]
            h //= 2
        for tx in range(MC):
            col = blk*MC + tx
            if col < inner:
                want = 0.0
                for q in range(parts):
                    ch = q % chunks
                    lc = (col - ch*T*V) % inner
                    if lc < L: want += pairs[q][lc]
                assert abs(sh[(0,tx)] - want) < 1e-9, (inner, T, chunks, bands, col)
import math
for inner in [64,65,70,73,99,100,333,1001,3001,4097,127]:
    for V in [4,8]:
        g = V//math.gcd(inner,V); Q = g*inner//V; T = min(512, (Q+31)//32*32); chunks=(Q+T-1)//T
        for chunk in range(chunks): stats_passes(inner, V, T, Q, chunk)
        for bands in [1,3,66,130]: merge(inner, V, T, chunks, bands)
print("ok")
