"""The launch path under concurrent use, without a GPU (the GPU half is test_gpu_concurrency.py).

- PreparedLaunch: many threads share one parameter block; every launch must see its own pointers. A fake
  cuLaunchKernel reads the block while other threads try to refill it; an unlocked twin shows the check bites.
- The split regime's workspace: two calls whose launches interleave on one stream must not share partials
  (the wrong results of issue 10). A fake stream records the launches in order and is replayed; a twin with one
  cached workspace shows the check bites.
- The caches are bounded, and a new row count M at a cached geometry costs no new plan (Plan.at).
"""

import ctypes
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("cuda.bindings", reason="cuda-bindings not installed")

from fakes import FakeLoadedKernel as _Loaded, run_threads, stub_device  # noqa: E402
from onlinesoftmax.runtime import launch  # noqa: E402
from onlinesoftmax.runtime.bounded import BoundedCache  # noqa: E402
from onlinesoftmax import opdefs  # noqa: E402
from onlinesoftmax.engines.cuda import plan as P  # noqa: E402
from onlinesoftmax.engines.cuda import run as E  # noqa: E402

SMS = 132


# ---- PreparedLaunch: one parameter block, many threads --------------------------------------------------------


@pytest.fixture(autouse=True)
def _bindings_entry(monkeypatch):
    """Prepared launches take cuda.bindings' entry (fake kernel handles are objects), whether libcuda is here or not."""
    monkeypatch.setattr(launch, "_CU_LAUNCH", False)


class _UnlockedLaunch(launch.PreparedLaunch):
    """Known wrong: fills the shared block and launches without the lock."""

    __slots__ = ()

    def _go(self, grid, first, ptrs) -> None:
        self._ptrs[:] = ptrs
        self._launch(self.dims[0], grid, *self.dims[2:], None, self._addr, 0)


def _race(cls, monkeypatch, threads=2, calls=3):
    """Each thread launches `calls` times with its own pointers; the fake cuLaunchKernel reads the three pointer
    parameters one at a time, sleeping between reads (so another thread overwrites an unguarded block in between). Returns the (sent, seen) pairs that differ."""
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "stream_handle", lambda device: 0)
    bad, lock = [], threading.Lock()
    tls = threading.local()

    def fake_launch(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        addrs = (ctypes.c_void_p * 3).from_address(params)
        seen = []
        for a in addrs:
            seen.append(ctypes.c_uint64.from_address(a).value)
            time.sleep(0.01)  # long enough for another thread to write its pointers, if nothing stops it
        if tuple(seen) != tls.sent:
            with lock:
                bad.append((tls.sent, tuple(seen)))
        return 0  # CUDA_SUCCESS

    p = cls(_Loaded(), 4, (128,), (np.int64(7), np.int32(3)))
    p._launch = fake_launch

    def worker(i):
        launch._state.bound = True
        for c in range(calls):
            tls.sent = (1000 * i + c, 7, 1000 * i + c + 1)
            p(*tls.sent)

    run_threads(worker, [(i + 1,) for i in range(threads)])
    return bad


def test_prepared_launch_parameter_block_is_per_call(monkeypatch):
    assert _race(launch.PreparedLaunch, monkeypatch, threads=4) == []


def test_race_check_catches_an_unlocked_block(monkeypatch):
    assert _race(_UnlockedLaunch, monkeypatch) != []


# ---- the split regime's workspace: launches of two calls interleaved on one stream ------------------------------


class _SharedWorkspaceEntry(E._Entry):
    """Known wrong (the bug of be1e6c1): one workspace cached for the stream, shared by every call."""

    __slots__ = ()
    _shared = torch.empty(64)

    def _split(self, M, a, b, out, x):
        stats, apply = self.calls
        stats.rows(1, M, a, b, self._shared.data_ptr())
        apply.rows(1, M, a, b, self._shared.data_ptr(), out)


class _Recycling:
    """torch.empty as a caching allocator behaves on one stream: a block freed is the next allocation's (at once,
    where the host's malloc may hand another thread another address), so a workspace let go before its call's
    launches are queued is the next call's too."""

    def __init__(self):
        self.lock, self.free, self.next = threading.Lock(), [], 1 << 20

    def __call__(self, *shape, **kw):
        with self.lock:
            if self.free:
                return _Block(self, self.free.pop())
            self.next += 1 << 12
            return _Block(self, self.next)


class _Block:
    def __init__(self, pool, addr):
        self.pool, self.addr = pool, addr

    def data_ptr(self) -> int:
        return self.addr

    def __del__(self):
        with self.pool.lock:
            self.pool.free.append(self.addr)


def _interleaved_split(cls, monkeypatch) -> list:
    """Two threads, one split call each, their launches queued on one fake stream: both stats launches before
    either apply (a barrier in the fake stats launch), the workspaces from a recycling allocator. Replays the
    stream: each apply must read the partials its own call's stats launch wrote. Returns the applies that read
    another call's partials."""
    monkeypatch.setattr(E.torch, "empty", _Recycling())
    stream, lock = [], threading.Lock()
    both = threading.Barrier(2, timeout=5)

    def stats(grid, M, a, b, ws):
        with lock:
            stream.append(("stats", a, ws))
        both.wait()

    def apply(grid, M, a, b, ws, out):
        with lock:
            stream.append(("apply", a, ws))

    e = object.__new__(cls)
    e.plan, e.contig, e.single, e.M = P.Plan("split", "softmax", torch.float32, 2, 10, 4, (), parts=16), False, None, 2
    e.pers, e.steps, e.device = ((1, 1, 0), (1, 1, 0)), (0, 0, 0), 0
    e.calls = (SimpleNamespace(rows=stats), SimpleNamespace(rows=apply))
    run_threads(e, [(call, 0, 0, SimpleNamespace(device="cpu")) for call in (1, 2)])
    assert len(stream) == 4
    wrong, writer = [], {}
    for kind, call, ws in stream:
        if kind == "stats":
            writer[ws] = call
        elif writer.get(ws) != call:
            wrong.append((call, writer.get(ws)))
    return wrong


def test_split_workspace_is_per_call(monkeypatch):
    assert _interleaved_split(E._Entry, monkeypatch) == []


def test_interleaving_check_catches_a_shared_workspace(monkeypatch):
    assert _interleaved_split(_SharedWorkspaceEntry, monkeypatch) != []


class _EarlyFreeEntry(E._Entry):
    """Known wrong: the workspace's pointer kept, its tensor let go before the launches (e802f51's _split)."""

    __slots__ = ()

    def _split(self, M, a, b, out, x):
        ws = torch.empty(32, device=x.device).data_ptr()
        stats, apply = self.calls
        stats.rows(1, M, a, b, ws)
        apply.rows(1, M, a, b, ws, out)


def test_interleaving_check_catches_a_workspace_freed_before_its_launches(monkeypatch):
    assert _interleaved_split(_EarlyFreeEntry, monkeypatch) != []


# ---- the group regime's workspace: each call's zeroed before its own launch ---------------------------------------


class _SharedGroupEntry(_SharedWorkspaceEntry):
    """Known wrong: the shared workspace for group calls, zeroed by each before its launch."""

    __slots__ = ()

    def _grouped(self, M, a, b, out, x):
        E.memset32(self.device, self._shared.data_ptr(), 0, 64)
        for call in self.calls:
            call.rows(1, M, a, b, self._shared.data_ptr(), out)


def _interleaved_group(cls, monkeypatch) -> list:
    """Two threads, one group call each, on one fake stream: both memsets before either call's launches (a barrier
    in the fake memset), the workspaces from a recycling allocator. Replays the stream: between a launch (the group
    kernel, then the one for its abandoned shares) and the zeroing of its workspace no other call may zero or use it
    (its tickets and counters would count twice). Returns the launches that shared theirs."""
    monkeypatch.setattr(E.torch, "empty", _Recycling())
    stream, lock = [], threading.Lock()
    both = threading.Barrier(2, timeout=5)

    def memset(device, ws, value, count):
        with lock:
            stream.append(("zero", threading.get_ident(), ws))
        both.wait()

    def group(grid, M, a, b, ws, out):
        with lock:
            stream.append(("launch", threading.get_ident(), ws))

    monkeypatch.setattr(E, "memset32", memset)
    e = object.__new__(cls)
    e.plan, e.contig, e.single, e.M = P.Plan("group", "softmax", torch.float32, 2, 10, 4, (), parts=3), False, None, 2
    e.pers, e.steps, e.device = ((3, 1, 0), (1, 1, 0)), (0, 0, 0), 0
    e.calls = (SimpleNamespace(rows=group), SimpleNamespace(rows=group))
    run_threads(e, [(call, 0, 0, SimpleNamespace(device="cpu")) for call in (1, 2)])
    assert len(stream) == 6
    wrong = []
    for i, (kind, who, ws) in enumerate(stream):
        if kind == "launch":
            zero = max(j for j in range(i) if stream[j][0] == "zero" and stream[j][1] == who)
            if stream[zero][2] != ws or any(w == ws and t != who for _, t, w in stream[zero + 1:i]):
                wrong.append(who)
    return wrong


def test_group_workspace_is_per_call(monkeypatch):
    assert _interleaved_group(E._Entry, monkeypatch) == []


def test_interleaving_check_catches_a_shared_group_workspace(monkeypatch):
    assert _interleaved_group(_SharedGroupEntry, monkeypatch) != []


# ---- bounded caches, cheap new M --------------------------------------------------------------------------------


def test_bounded_cache_evicts_the_oldest_and_makes_each_key_once():
    c = BoundedCache(3)
    for k in range(5):
        assert c.get_or_make(k, lambda k=k: k * 10) == k * 10
    assert len(c) == 3 and c.get(0) is None and c.get(1) is None and c.get(4) == 40
    made, barrier = [], threading.Barrier(8)

    def make():
        made.append(1)
        return "v"

    def worker():
        barrier.wait()
        assert c.get_or_make("k", make) == "v"

    run_threads(worker, [()] * 8)
    assert len(made) == 1 and len(c) == 3


def test_bounded_cache_tells_on_drop_of_every_value_that_leaves():
    """Evicted, replaced by another value, cleared: each once (what mirrors the cache, the native table, drops its
    entry); a value put again under its own key stays; put's then() runs once the value is in."""
    dropped = []
    c = BoundedCache(2, dropped.append)
    c.put("a", "A")
    c.get_or_make("b", lambda: "B")
    c.put("c", "C")  # evicts A
    c.put("c", "C")  # the same value again: not dropped
    c.get_or_make("d", lambda: "D")  # evicts B
    c.put("d", "D2")  # replaces D
    assert dropped == ["A", "B", "D"]
    seen = []
    c.put("e", "E", lambda: seen.append((c.get("e"), list(dropped))))  # then(): once in, after what it dropped
    assert seen == [("E", ["A", "B", "D", "C"])]
    c.clear()
    assert sorted(dropped[4:]) == ["D2", "E"] and len(c) == 0


def _probe_geometries():
    for op in P.ENGINE_OPS:
        for dtype in opdefs.GPU_DTYPES:
            for vec in (True, False):
                W = P.vec_width(dtype) if vec else 1
                for N in P._probe_ns(W)[::5]:
                    yield dict(N=N, dtype=dtype, op=op, vec=vec)
                    if vec and N <= P.FLAT_MAX_N:  # contiguous aligned rows: flat from flat_from rows on
                        yield dict(N=N, dtype=dtype, op=op, vec=N % W == 0, window=1, flat=True)
                    for inner in (1, 3, 64 * W):
                        yield dict(N=N, dtype=dtype, op=op, vec=vec, inner=inner, layout="strided")


def test_plan_at_another_row_count_equals_a_fresh_plan():
    """Plan.at is what lets every M >= stable_rows share one cached plan: it must equal plan(M) exactly, on each
    side of flat_from where the flat regime takes contiguous aligned rows from there on (two cached plans)."""
    lo = P.stable_rows(SMS)
    checked = flats = 0
    for g in _probe_geometries():
        t = P.flat_from(g["op"], g["dtype"], g["N"], SMS) if g.get("flat") else 0
        assert t == 0 or t > lo
        for first, rows in ((lo, (lo + 1, 3 * lo + 7, t - 1 if t else 1 << 20)), (t, (t + 1, 5 * t + 3)))[:1 + bool(t)]:
            try:
                base = P.plan(first, sms=SMS, **g)
            except P.Unsupported:
                continue
            for M in rows:
                try:
                    want = P.plan(M, sms=SMS, **g)
                except P.Unsupported:
                    continue
                assert base.at(M) == want, (g, first, M)
                checked += 1
                flats += want.regime == "flat"
    assert checked > 1000 and flats > 100


def test_new_row_counts_share_one_plan(monkeypatch):
    """4000 distinct M at N = 32000 (a server's batch sizes): one plan for the stable ones, each equal to
    plan(M); the few-row ones are planned per M, and the plan cache stays bounded."""
    monkeypatch.setattr(E, "_plans", BoundedCache(E.PLAN_CACHE))
    monkeypatch.setattr(E, "kernel", lambda *a: SimpleNamespace(fits=True, resident=None))  # few rows: clusters fit
    calls = []
    real = P.plan
    monkeypatch.setattr(E, "plan", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    lo = P.stable_rows(SMS)
    for M in range(1, 4001):
        p = E._fitted_plan(M, 32000, torch.bfloat16, "softmax", True, 1, 1, "rows", SMS, None, 0, "split")
        assert p == real(M, 32000, torch.bfloat16, "softmax", vec=True, sms=SMS)
    assert len(calls) == lo  # M = 1 .. lo - 1 and the first stable M
    assert len(E._plans) == lo <= E.PLAN_CACHE


def test_entry_caches_are_bounded():
    for cache in (E._fwd_entries, E._bwd_entries, E._fwd_rows, E._bwd_rows, E._fwd_shapes, E._bwd_shapes, E._entries,
                  E._plans):
        assert isinstance(cache, BoundedCache) and cache.limit <= 4096


class _Recorder:
    """A loaded kernel for K.kernel whose prepared launches record (kernel, grid, first scalar) per launch."""

    def __init__(self, log):
        self.log, self.fits, self.resident, self.resident_ctas = log, True, None, 2 * SMS

    def bind(self, grid, tail, pointers, pdl=False, coop=False):
        p = launch.PreparedLaunch(_Loaded(), grid, (128,), tail, 0, pointers)
        ptrs = pointers

        def fake(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            first = ctypes.c_int64.from_address((ctypes.c_void_p * (ptrs + 1)).from_address(params)[ptrs]).value
            self.log.append((gx, first))
            return 0  # CUDA_SUCCESS

        p._launch = fake
        return p


@pytest.mark.parametrize("N,dtype,op,al", [(32000, torch.bfloat16, "log_softmax", 1), (4097, torch.float32, "softmax", 1),
                                           (200003, torch.float32, "softmax", 1), (1000, torch.float16, "softmax", 1),
                                           (65536, torch.float32, "softmax_backward", 1),
                                           (1023, torch.bfloat16, "softmax", 0), (63, torch.float16, "softmax", 0),
                                           (127, torch.bfloat16, "log_softmax_backward", 0),
                                           (300007, torch.float32, "softmax_backward", 1)])
def test_row_entries_launch_what_plan_gives_each_row_count(monkeypatch, N, dtype, op, al):
    """The rows fast path shares an entry among all row counts whose plans have one geometry (every M >=
    stable_rows, two classes around flat_from where the flat regime takes contiguous aligned rows, and runs of
    few-row Ms), and the first few-row call of a row length keys every few-row M: entry.rows(M) must launch exactly
    the grids and row count of plan(M), split and flat included, whichever M comes first, and a new M after the
    first two calls builds nothing; so must the exact-shape call made from that entry. al: the pointers' alignment
    key (1: unaligned, 0: aligned)."""
    log = []
    stub_device(monkeypatch, SMS)
    monkeypatch.setattr(E, "kernel", lambda *a: _Recorder(log))
    monkeypatch.setattr(E, "memset32", lambda device, ptr, value, count: log.append(("zero", value, count)))
    monkeypatch.setattr(E, "_geometries", BoundedCache(E.ENTRY_CACHE))
    monkeypatch.setattr(E, "_plans", BoundedCache(E.PLAN_CACHE))
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "stream_handle", lambda device: 0)
    launch._state.bound = True
    lo = P.stable_rows(SMS)
    t = P.flat_from(op, dtype, N, SMS) if not al else 0
    x = torch.zeros(max(2 * lo, 3 * t), N, dtype=dtype)
    ins = (x, x) if opdefs.OPS[op].backward else (x,)
    cache, made, entries, regimes = BoundedCache(E.ROWS_CACHE), [], set(), set()
    ms = [7] + list(range(1, 2 * lo, 7)) + [lo - 1, lo, 2 * lo - 1] + ([t - 1, t, t + 5, 3 * t] if t else [])
    for M in ms if al else ms[:1] + ms[::-1]:  # the stable class made first from its flat side, then from below
        key = (False, N, dtype, 0, al, M if M < lo else 0)  # what forward() keys a contiguous call by
        e = cache.get(key) or cache.get_or_make(key, lambda: made.append(M) or E._rows_entry(
            op, tuple(t[:M] for t in ins), x[:M], 1, cache, key))
        entries.add(id(e))
        log.clear()
        e.rows(M, 16, 16 if len(ins) > 1 else 0, 32, x)
        want = P.plan(M, N, dtype, op, sms=SMS, vec=not al and N % P.vec_width(dtype) == 0, window=1, flat=not al)
        regimes.add(want.regime)
        assert log == _launched(want), (M, want.regime)
        log.clear()  # the exact-shape call forward() caches (its grid made once) launches the same
        E._Shaped(e, M)(16, 16 if len(ins) > 1 else 0, 32, x)
        assert log == _launched(want), (M, want.regime, "exact shape")
    assert ("flat" in regimes) == bool(t) and (not t or len(regimes) == 2)
    assert made[0] == 7 and len(made) == 2 and made[1] >= lo  # every few-row M keyed at once; the stable class
    assert len(entries) <= 48, len(entries)


def test_row_entries_launch_what_plan_gives_each_row_count_with_groups(monkeypatch):
    """The same where automatic plans take the group regime (plan.GROUP_AUTOMATIC): the few-row Ms split, the others
    zero their workspace and launch the group kernel once."""
    monkeypatch.setattr(P, "GROUP_AUTOMATIC", True)
    test_row_entries_launch_what_plan_gives_each_row_count(monkeypatch, 300007, torch.float32, "softmax_backward", 1)
    assert P.plan(4096, 300007, torch.float32, "softmax_backward", vec=False, window=1, sms=SMS).regime == "group"


def _launched(p) -> list:
    """(grid, row count) of each launch plan p makes: the split regime's two kernels once per wave of p.wave rows
    (the last wave the rest) where it goes in waves, every other launch once for all M rows; the group regime's
    after its whole workspace is zeroed ("zero", 0, words)."""
    if p.regime == "group":
        return [("zero", 0, P.group_workspace(p.M, p.parts))] + [(l.grid, p.M) for l in p.launches]
    if p.regime != "split" or not p.wave:
        return [(l.grid, p.M) for l in p.launches]
    waves = [min(p.wave, p.M - r) for r in range(0, p.M, p.wave)]
    return [(P.grid_for(g, l.per), g) for g in waves for l in p.launches]


def test_flat_needs_every_tensor_on_a_16_byte_boundary(monkeypatch):
    """The flat regime reads whole 16-byte accesses from each tensor's start: a contiguous view one element into its
    buffer (x, dy or out) must take another plan; the same shapes aligned take flat (bf16 rows of 63, enough rows)."""
    stub_device(monkeypatch, SMS)
    monkeypatch.setattr(E, "kernel", lambda *a: _Recorder([]))
    monkeypatch.setattr(E, "_plans", BoundedCache(E.PLAN_CACHE))
    N, dt = 63, torch.bfloat16
    M = max(P.flat_from("softmax", dt, N, SMS), P.flat_from("softmax_backward", dt, N, SMS)) + 1

    def at(offset):  # a contiguous (M, N) view starting `offset` elements into a 16-byte aligned buffer
        buf = torch.zeros(M * N + 8, dtype=dt)
        assert buf.data_ptr() % 16 == 0
        return buf[offset:offset + M * N].view(M, N)

    x, y, dy, out = at(0), at(0), at(0), at(0)
    assert E.plan_for("softmax", x, out=out).regime == "flat"
    assert E.plan_for("softmax_backward", y, dy, out=out).regime == "flat"
    assert E.plan_for("softmax", at(1), out=out).regime != "flat"
    assert E.plan_for("softmax", x, out=at(3)).regime != "flat"
    assert E.plan_for("softmax_backward", y, at(1), out=out).regime != "flat"
    assert E.plan_for("softmax_backward", at(2), at(2), out=at(2)).regime != "flat"  # alike, but not on a boundary


class _Named:
    """A loaded kernel for E.kernel whose prepared launches record (kernel, grid, row count, pointers) per launch."""

    def __init__(self, name, log):
        self.name, self.log, self.fits, self.resident = name, log, True, None

    def bind(self, grid, tail, pointers, pdl=False, coop=False):
        p = launch.PreparedLaunch(_Loaded(), grid, (128,), tail, 0, pointers)
        name, log = self.name, self.log

        def fake(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            addrs = (ctypes.c_void_p * (pointers + 1)).from_address(params)
            ptrs = tuple(ctypes.c_uint64.from_address(a).value for a in addrs[:pointers])
            log.append((name, gx, ctypes.c_int64.from_address(addrs[pointers]).value, ptrs))
            return 0  # CUDA_SUCCESS

        p._launch = fake
        return p


class _Bound(list):
    """Each bind as (kernel name, scalar tail, pdl); .coop: the names bound as cooperative launches; .launched: each
    launch of a bound kernel as (kernel name, grid or None for the bound one, pointers)."""

    def __init__(self):
        super().__init__()
        self.coop, self.launched = [], []


def _binds(monkeypatch) -> _Bound:
    """run.kernel replaced by fakes that record each bind into the _Bound returned."""
    bound = _Bound()

    class Kernel:
        fits, resident = True, None

        def __init__(self, name):
            self.name = name

        def bind(self, grid, tail, pointers, pdl=False, coop=False):
            bound.append((self.name, tuple(tail), pdl))
            if coop:
                bound.coop.append(self.name)
            return SimpleNamespace(rows=lambda g, M, *ptrs: bound.launched.append((self.name, g, ptrs)))

    monkeypatch.setattr(E, "kernel", lambda name, *a: Kernel(name))
    return bound


def test_split_apply_and_group_fix_are_programmatic_launches(monkeypatch):
    """The split regime's phase 2 (apply) and the group regime's second kernel (fix: the shares a group's CTAs
    abandoned) are bound as programmatic launches: each may start as the kernel before's CTAs exit (or, the fix,
    once they have all started), and waits in the kernel for what that one wrote (os_grid_wait). Phase 1, the group
    kernel and the other regimes' launches are plain: phase 1 of a wave reuses the workspace the wave before's phase
    2 reads; the group kernel's workspace was zeroed just before it."""
    bound = _binds(monkeypatch)
    for M, N, dtype, op in ((2, 1000003, torch.float32, "softmax"), (64, 1000000, torch.bfloat16, "softmax_backward"),
                            (4, 4096, torch.float32, "log_softmax"), (9, 131072, torch.bfloat16, "softmax")):
        p = P.plan(M, N, dtype, op, vec=N % 8 == 0, window=1, sms=SMS)
        bound.clear()
        E._Entry(p, 0, False, (N,) * len(opdefs.OPS[op].inputs), N)
        want = [(k, l.sig in ("apply", "fix")) for k, l in zip(p.kernels, p.launches)]
        got = [(k, pdl) for k, _, pdl in bound]
        assert got == want and (p.regime in ("split", "group")) == any(pdl for _, pdl in got), (p.regime, got)


def test_bands_entries_bind_both_kernels(monkeypatch):
    """The bands regime's two launches: the bands kernel with (outer, N, inner, strips, G, chunk, wait) plain, bands_fix
    with the same but the wait as a programmatic launch (it may start once every bands CTA has, and waits for their
    end); chunk, the band's rows, tells both kernels how many accesses a thread holds in shared memory."""
    bound = _binds(monkeypatch)
    p = P.plan(8, 1000, torch.bfloat16, "softmax_backward", inner=4096, layout="strided", regime="bands", sms=SMS)
    E._Entry(p, 0, False, (0, 0), 0)
    (b, bt, bpdl), (f, ft, fpdl) = bound
    assert (b, f) == p.kernels and not bpdl and fpdl
    assert [int(v) for v in bt] == [8, 1000, 4096, p.strips, p.parts, p.chunk, P.GROUP_WAIT_NS] and ft == bt[:-1]
    assert p.parts == 2 and p.chunk == 512  # 1000 rows in two bands of 32 rows of threads x (7 + 9) accesses


def test_period_entry_binds_one_cooperative_launch(monkeypatch):
    """The period regime's one kernel (stats, merge and apply, grid barriers between them) bound as a cooperative
    launch (every CTA resident, or the launch fails), not a programmatic one, with (outer, N, inner, bands, chunks,
    periods a band) after its four pointers (a, b, workspace, out); the workspace holds the stats' pairs and the
    merge's column pairs (plan.period_workspace), nothing of it zeroed: no memset before the launch (the grid
    barriers are the driver's)."""
    bound = _binds(monkeypatch)
    p = P.plan(1, 4097, torch.float32, "softmax", inner=1001, layout="strided", sms=SMS)
    assert p.regime == "period" and p.kernels == ("fwd_period<0,0>",)
    E._Entry(p, 0, False, (0,), 0)
    assert [(k, pdl) for k, _, pdl in bound] == [(p.kernels[0], False)] and bound.coop == list(p.kernels)
    assert [int(v) for v in bound[0][1]] == [1, 4097, 1001, p.parts, p.strips, p.chunk, p.keep] and p.keep > 0
    zeroed = []
    monkeypatch.setattr(E, "memset32", lambda device, ptr, value, count: zeroed.append((ptr, value, count)))
    e = E._Entry(p, 0, False, (0,), 0)
    e(11, 0, 33, torch.empty(0))  # the call: the kernel on (a, b, ws, out) and nothing before it
    (name, grid, (a, b, ws, out)), = bound.launched
    assert (name, grid, a, b, out) == (p.kernels[0], p.launches[0].grid, 11, 0, 33)
    assert zeroed == [] and ws != 0
    g, Q, T, chunks, L, periods = P.period_geometry(torch.float32, 4097, 1001)
    assert (g, Q, T, chunks, L, periods) == (4, 1001, 512, 2, 1001, 1025) and p.strips == chunks
    assert p.parts * p.chunk >= periods > (p.parts - 1) * p.chunk  # every period in one band
    assert p.workspace == 2 * (p.parts * chunks * L + 1001)
    assert p.workspace_for(1) == (p.workspace, 0)


def test_group_entries_bind_the_plans_wait(monkeypatch):
    """The group kernel's last argument is its plan's wait (plan.GROUP_WAIT_NS when planned; grp_fix takes the rest
    of its arguments), and a plan made under another wait gets an entry of its own (run._shared_entry keys on it):
    a GPU test that sets the wait to 0 then runs kernels bound with 0, not an entry cached before with 200 us."""
    tails = _binds(monkeypatch)
    monkeypatch.setattr(E, "_geometries", BoundedCache(E.ENTRY_CACHE))
    N, entries = 1000003, []
    for wait in (P.GROUP_WAIT_NS, 0):
        monkeypatch.setattr(P, "GROUP_WAIT_NS", wait)
        p = P.plan(64, N, torch.float32, "softmax", vec=False, window=1, sms=SMS)
        assert p.regime == "group" and p.wait == wait
        tails.clear()
        entries.append(E._shared_entry("softmax", (p, 0, False, (N,), N)))
        (g, gt, _), (f, ft, _) = tails
        assert "_grp<" in g and int(gt[-1]) == wait and "_grp_fix<" in f and ft == gt[:-1]
    assert entries[0] is not entries[1]


def test_kept_workspaces_and_the_abandoned_shares_read_from_them():
    """run.KeptWorkspaces keeps the fp32 vectors run.py allocates while it is active (and nothing after it);
    plan.group_abandoned sums the high 16 bits of each row's arrival word, at the block stride of group_words."""
    M, G = 3, 5
    with E.KeptWorkspaces() as keep:
        ws = E.torch.empty(P.group_workspace(M, G), dtype=torch.float32)
        E.torch.empty(4, dtype=torch.int32)  # not a workspace: not kept
    assert E.torch is torch and keep.kept == [ws] and ws.numel() == 2 + M * P.group_words(G)
    words = ws.view(torch.int32)
    words.zero_()
    for row, (arrived, gone) in enumerate(((5, 0), (5, 3), (2, 2))):
        words[2 + row * P.group_words(G)] = arrived | (gone << 16)
        words[3 + row * P.group_words(G)] = 7 << 16  # the word after it, unused: not read
    assert P.group_abandoned(ws, M, G) == 5


def _at(M, N, dtype, offset):
    """A contiguous (M, N) tensor `offset` elements into a 16-byte aligned buffer."""
    return torch.zeros(M * N + 16, dtype=dtype)[offset:offset + M * N].view(M, N)


@pytest.mark.parametrize("dtype,N,M", [(torch.bfloat16, 1001, 3), (torch.float32, 1001, 700), (torch.float16, 4096, 2),
                                       (torch.bfloat16, 63, 40001), (torch.float32, 200003, 1)])
def test_forward_backward_exact_shape_keys(monkeypatch, dtype, N, M):
    """forward() and backward() key contiguous rows by their exact shape and every pointer's offset from 16 bytes: the
    same shape at other offsets of x, dy or out needs other kernels (aligned, flat, the window with P = 1 or 2, the
    scalar path), and each call, first or cached, in any order, must launch what the full plan of its own tensors
    gives (plan_for), with its own pointers. A key that left out one offset would hand a later call the kernels of
    an earlier one."""
    log = []
    stub_device(monkeypatch, SMS)
    monkeypatch.setattr(E, "kernel", lambda name, *a: _Named(name, log))
    monkeypatch.setattr(E, "_stable", {-1: P.stable_rows(SMS)})
    for cache in ("_fwd_shapes", "_bwd_shapes", "_fwd_rows", "_bwd_rows", "_geometries", "_plans"):
        monkeypatch.setattr(E, cache, BoundedCache(getattr(E, cache).limit, getattr(E, cache).on_drop))
    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "stream_handle", lambda device: 0)
    launch._state.bound = True
    offsets = ((0, 0, 0), (1, 1, 1), (1, 1, 0), (0, 2, 3), (3, 3, 3), (0, 0, 5), (0, 1, 0), (1, 0, 0))
    kernels = set()
    for _ in range(2):  # the first round fills the caches, the second takes every call from them
        for log_op in (False, True):
            for xo, yo, oo in offsets:
                x, out = _at(M, N, dtype, xo), _at(M, N, dtype, oo)
                op = "log_softmax" if log_op else "softmax"
                want = E.plan_for(op, x, dim=1, out=out)
                log.clear()
                E.forward(x, out, 1, log_op)
                got = [(k, g, m) for k, g, m, _ in log]
                assert got == [(l.kernel, l.grid, M) for l in want.launches], (op, xo, oo)
                if len(want.launches) == 1:
                    assert log[0][3] == (x.data_ptr(), 0, out.data_ptr())
                kernels.update(want.kernels)
                y, dy = _at(M, N, dtype, xo), _at(M, N, dtype, yo)
                bop = op + "_backward"
                want = E.plan_for(bop, y, dy, dim=1, out=out)
                log.clear()
                E.backward(y, dy, out, 1, log_op)
                assert [(k, g, m) for k, g, m, _ in log] == [(l.kernel, l.grid, M) for l in want.launches], (
                    bop, xo, yo, oo)
                if len(want.launches) == 1:
                    assert log[0][3] == (y.data_ptr(), dy.data_ptr(), out.data_ptr())
                kernels.update(want.kernels)
    assert len(kernels) >= 6  # the offsets took different kernels: the keys had something to tell apart
