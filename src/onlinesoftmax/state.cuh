// state.cuh -- the online-softmax state on the device, for every CUDA source of the package (the seeds' ladder
// and the production engine); the device side of state.py. Knows nothing of torch.
//
// The online-softmax state of a set of values x_i is (m, d):  m = max x_i,  d = sum exp(x_i - m).
//   (m1,d1) (+) (m2,d2) = (M, d1*exp(m1 - s) + d2*exp(m2 - s)),  M = max(m1,m2),
//   s = M, or 0 when M = -inf (the guard: two empty states stay (-inf, 0) instead of NaN).
// Identity (-inf, 0). NaN is not over-guarded: fmaxf ignores NaN, so exp(NaN - m) poisons d and
// the whole row becomes NaN; a +inf gives exp(inf - inf) = NaN the same way (as torch does).
// Every exponent is exp(x - m) with x <= m, never exp(x) * exp(-m): no overflow near FLT_MAX.
//
// Included textually by the Python runtime (runtime/nvrtc.py inlines local #include "..." files),
// so it must not include anything itself: NVRTC without a toolkit has no <cmath>/<cfloat>.
#pragma once

#define OS_FULL_MASK 0xffffffffu
#define OS_WARP 32
// -inf without <math.h> (NVRTC has no INFINITY macro).
#define OS_NEG_INF __int_as_float(0xff800000)

// The max to subtract: m itself, or 0 when m = -inf (the guard, state.py:safe_shift).
__device__ __forceinline__ float os_safe_shift(float m) { return m == OS_NEG_INF ? 0.0f : m; }

// 1/d, or 0 for an empty row (d == 0: every entry -inf) so the row's output is 0, not NaN.
// d = NaN (a NaN or +inf in the row) stays NaN.
__device__ __forceinline__ float os_safe_inv(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

