"""Session 84: a Python model of next-period-merge-shfl.diff's merge phase (no GPU): PERIOD_MCOLS = 8 columns an
item, thread (ty, tx) = (tid // 8, tid % 8) loading parts ty, ty + R, ... (R = T / 8) as before; then a warp's four
rows folded by xor shuffles over lanes 8 and 16, its row stored at the stats' pairs' place [warp x 8 + lane] (lanes
below 8), one barrier, and warp 0's lane (l // 8, tx) folding warps l // 8, l // 8 + 4, ... and shuffling again.
Checks every column against a direct sum, that every thread of a warp shuffles (T whole warps), that the places
written lie inside the T x V pairs (never the kept periods after them), and that each warp's row is read once;
odd and even inner 64-4097, V = 4 and 8, T from plan.period_geometry's rule, 1-130 bands."""
import math
import random


def butterflies(states, MC):
    """os_xor_merge over lane offsets MC, 2 MC, ... below 32 (the kernel's loop): each lane's state summed with its
    partner's, every warp of the list at once."""
    off = MC
    while off < 32:
        states = [states[t] + states[t ^ off] for t in range(len(states))]
        off *= 2
    return states


def merge(inner, V, T, chunks, bands, MC=8, B=4):
    assert T % 32 == 0
    L, R, parts, warps = min(inner, T * V), T // MC, bands * chunks, T // 32
    pairs = [[random.random() for _ in range(L)] for _ in range(parts)]
    for blk in range((inner + MC - 1) // MC):
        acc = [0.0] * T
        for tid in range(T):  # the loads, as HEAD
            tx, ty = tid % MC, tid // MC
            col, q0 = blk * MC + tx, ty
            while col < inner and q0 < parts:
                for u in range(B):
                    q = q0 + u * R
                    lc = col - (q % chunks) * T * V % inner
                    if lc < 0:
                        lc += inner
                    if q < parts and lc < L:
                        acc[tid] += pairs[q][lc]
                q0 += B * R
        acc = butterflies(acc, MC)  # within each warp (all 32 lanes hold a state)
        sh = {}
        for tid in range(T):
            w, lane = tid // 32, tid % 32
            if lane < MC:
                place = w * MC + lane
                assert place < T * V and place not in sh
                sh[place] = acc[tid]
        reads = {}
        st = [0.0] * 32
        for lane in range(32):  # warp 0 after the barrier
            tx, w = lane % MC, lane // MC
            while w < warps:
                st[lane] += sh[w * MC + tx]
                reads[(w, tx)] = reads.get((w, tx), 0) + 1
                w += 32 // MC
        assert all(reads.get((w, tx)) == 1 for w in range(warps) for tx in range(MC))
        st = butterflies(st, MC)
        for tx in range(MC):
            col = blk * MC + tx
            if col < inner:
                want = sum(pairs[q][(col - (q % chunks) * T * V) % inner] for q in range(parts)
                           if (col - (q % chunks) * T * V) % inner < L)
                assert abs(st[tx] - want) < 1e-9, (inner, T, chunks, bands, col)


random.seed(84)
n = 0
for inner in [64, 65, 70, 73, 99, 100, 127, 333, 1001, 3001, 4097]:
    for V in [4, 8]:
        g = V // math.gcd(inner, V)
        Q = g * inner // V
        T = min(512, (Q + 31) // 32 * 32)
        chunks = (Q + T - 1) // T
        for bands in [1, 3, 66, 130]:
            merge(inner, V, T, chunks, bands)
            n += 1
print(f"ok: {n} (inner, V, bands) cases")
