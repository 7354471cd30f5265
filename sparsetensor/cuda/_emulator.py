"""A CPU emulator of the kernels, for testing the CUDA backend on machines without a GPU.

Not part of the public API, and not a simulator of performance: it exists so that the
*real* ``kernels/*.cu`` sources and the *real* host code of :mod:`sparsetensor.cuda`
(allocation, scans, sorts, launches, error reporting) can run in CI, where there is
no GPU. ``tests/cuda/test_cuda.py`` and ``test_cuda_interop.py`` run every GPU test twice: on a
real device when one is present, and on this emulator when a C++17 compiler is.

How it works:

- each ``.cu`` file is compiled by the host C++ compiler with a prelude that maps the
  CUDA keywords and intrinsics to C++ (``__shared__`` becomes ``static``: blocks run
  one after another, so a static array is the running block's shared memory);
- every thread of a block is a fiber with its own stack (switched by a few instructions on
  x86-64, a ``ucontext`` elsewhere); ``__syncthreads()`` parks a fiber
  until every thread of its block arrives, and the warp intrinsics (``__shfl*_sync``,
  ``__match_any_sync``) exchange values through a per-warp slot array between two
  warp barriers; a barrier that some threads reach after others have exited, or a
  deadlock, is reported as an error (on a GPU it would be undefined behaviour);
- :class:`EmulatedDevice` stands in for :class:`sparsetensor.cuda._driver.Device`
  (host memory, synchronous copies) and launches a kernel by calling the generated
  ``extern "C"`` launcher of its instantiation.

What it cannot show: timing, warp-divergence effects, and anything the driver does.
Fibers interleave only at barriers, so a race between threads does not change a result
here; built under a sanitizer (``SPARSETENSOR_EMULATOR_SANITIZE``, run by
``ci/emulator_sanitize.sh``) the emulator reports it instead: ``thread`` (ThreadSanitizer,
each CUDA thread a fiber it knows, ordered only by barriers, warp exchanges, its block's end
and atomics) names two threads of a block touching one address without an order (the blocks
run one after another, so a race between blocks is not seen), and ``address``
(AddressSanitizer, device buffers allocated to the byte) a read or write outside a buffer.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from . import _source

__all__ = ["EmulatedDevice", "compiler", "build_library", "PRELUDE"]

PRELUDE = r'''
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <math.h>
#include <string>
#include <vector>
#include <utility>
#include <functional>
#include <ucontext.h>

#define ST_HOST_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) alignas(n)

struct emu_dim3 { unsigned x, y, z; };

// Under a sanitizer (the emulator's memcheck and racecheck, see sanitizing() below) the fiber
// switches are announced to it: AddressSanitizer learns which stack runs, ThreadSanitizer runs
// every thread of a block as a fiber of its own, ordered only by the barriers and the end of
// the block. The emulator's own bookkeeping (ST_EMU_INTERNAL) is not watched for races.
#if defined(ST_EMU_ASAN)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
extern "C" void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
#endif
#if defined(ST_EMU_TSAN)
extern "C" void* __tsan_get_current_fiber(void);
extern "C" void* __tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void* fiber);
extern "C" void __tsan_switch_to_fiber(void* fiber, unsigned flags);
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void __tsan_set_fiber_name(void* fiber, const char* name);
#define ST_EMU_INTERNAL __attribute__((no_sanitize("thread"), noinline))
#else
#define ST_EMU_INTERNAL
#endif

// Switching fibers: on x86-64 a switch saves the callee-saved registers on the running stack
// and loads another stack pointer. glibc's swapcontext also saves and restores the signal
// mask, a system call per switch, which dominated the emulator's run time. Elsewhere (or with
// ST_EMU_UCONTEXT defined) the fibers are ucontexts.
#if defined(__x86_64__) && !defined(ST_EMU_UCONTEXT)
#define ST_EMU_STACK_SWITCH 1
extern "C" void st_emu_switch(void** save_sp, void* next_sp);
asm(R"(
    .text
    .p2align 4
    .globl st_emu_switch
    .hidden st_emu_switch
    .type st_emu_switch, @function
st_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size st_emu_switch, .-st_emu_switch
)");
#endif

namespace emu {
enum State { READY = 0, WAIT_BLOCK = 1, WAIT_WARP = 2, DONE = 3 };
#ifdef ST_EMU_STACK_SWITCH
struct Fiber { void* sp; int state; emu_dim3 tid; char* stack; void* tsan; unsigned barriers, warp_barriers; };
inline void* sched_sp = nullptr;
#else
struct Fiber { ucontext_t ctx; int state; emu_dim3 tid; char* stack; void* tsan; unsigned barriers, warp_barriers; };
#endif
inline std::vector<Fiber> fibers;
inline std::vector<char> stacks;
inline Fiber* cur = nullptr;
inline ucontext_t sched;
inline emu_dim3 block_idx, block_dim, grid_dim;
inline std::function<void()> body;
inline std::string error;
inline unsigned char slots[1024][16];   // warp exchange: one slot per thread of the block
inline unsigned long long seed = 0;     // 0: blocks and threads in order; else a shuffled order
const size_t STACK = 256 * 1024;
// stacks lie STRIDE apart: not a multiple of a page, so that the tops of the stacks (where
// every switch saves and loads registers) fall in different cache sets
const size_t STRIDE = STACK + 17 * 64;

// What the sanitizers are told at each switch (nothing without one).
inline const void* sched_bottom = nullptr;
inline size_t sched_size = 0;
inline void* sched_tsan = nullptr;
// ThreadSanitizer's synchronization objects (only their addresses matter): a block barrier and
// each warp's barrier alternate between two, so that a thread already past the next barrier
// cannot hand its later writes to one still leaving this one; the end of a block orders it
// before the next block (which reuses the __shared__ arrays and the stacks) and the next launch;
// what the scheduler did before a block (the host's copies, the blocks before) is handed to its
// threads through block_start.
inline char block_sync[2], warp_sync[32][2], block_start, block_end;
// ThreadSanitizer's fibers, one per thread slot, kept from block to block: creating one clears
// most of a megabyte, which for every thread of every block made the racecheck crawl. A kept
// fiber's shadow stack does not grow, as entry() and trampoline() are not instrumented.
inline std::vector<void*> tsan_fibers;

ST_EMU_INTERNAL inline void to_fiber(Fiber& f) {  // the scheduler, before switching to f
#ifdef ST_EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, f.stack, STACK);
#endif
#ifdef ST_EMU_TSAN
    __tsan_switch_to_fiber(f.tsan, 1);  // 1: no synchronization; the threads run concurrently
#endif
}
ST_EMU_INTERNAL inline void in_scheduler() {  // the scheduler, once a fiber switched back
#ifdef ST_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}
ST_EMU_INTERNAL inline void in_fiber() {  // a fiber, once switched to
#ifdef ST_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
}
ST_EMU_INTERNAL inline void to_scheduler() {  // a fiber, before switching to the scheduler
#ifdef ST_EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, sched_bottom, sched_size);
#endif
#ifdef ST_EMU_TSAN
    __tsan_switch_to_fiber(sched_tsan, 1);
#endif
}
ST_EMU_INTERNAL inline void new_fiber(Fiber& f, char* stack) {
    f.stack = stack;
    f.barriers = f.warp_barriers = 0;
#ifdef ST_EMU_ASAN
    __asan_unpoison_memory_region(stack, STACK);  // frames a finished fiber never left
#endif
#ifdef ST_EMU_TSAN
    while (tsan_fibers.size() <= f.tid.x) tsan_fibers.push_back(__tsan_create_fiber(0));
    f.tsan = tsan_fibers[f.tid.x];
    char name[64];  // a report names its threads by these
    std::snprintf(name, sizeof name, "blockIdx.x %u threadIdx.x %u", block_idx.x, f.tid.x);
    __tsan_set_fiber_name(f.tsan, name);
#endif
}
ST_EMU_INTERNAL inline void* barrier_sync(Fiber& f, int why) {
    return why == WAIT_BLOCK ? (void*)&block_sync[f.barriers++ & 1] : (void*)&warp_sync[(f.tid.x >> 5) & 31][f.warp_barriers++ & 1];
}

ST_EMU_INTERNAL inline unsigned long long next_random() {  // xorshift64*
    seed ^= seed >> 12; seed ^= seed << 25; seed ^= seed >> 27;
    return seed * 2685821657736338717ull;
}

// 0..n-1 in order, or shuffled when a seed is set
ST_EMU_INTERNAL inline std::vector<unsigned> order(unsigned n) {
    std::vector<unsigned> o(n);
    for (unsigned i = 0; i < n; ++i) o[i] = i;
    if (seed) for (unsigned i = n; i > 1; --i) std::swap(o[i - 1], o[next_random() % i]);
    return o;
}

ST_EMU_INTERNAL inline void fail(const std::string& what) { if (error.empty()) error = what; }

#ifdef ST_EMU_STACK_SWITCH
// a fiber's first switch returns here (see start_fiber); it never returns
[[noreturn]] ST_EMU_INTERNAL inline void entry() {
    in_fiber();
#ifdef ST_EMU_TSAN
    __tsan_acquire(&block_start);
#endif
    body();
#ifdef ST_EMU_TSAN
    __tsan_release(&block_end);
#endif
    cur->state = DONE;
    void* unused;
    to_scheduler();
    st_emu_switch(&unused, sched_sp);
    __builtin_unreachable();
}

// A new fiber's stack, as st_emu_switch leaves a parked one: the MXCSR and x87 control
// words, six zero registers, then entry() as the return address, placed so that entry
// starts with the stack alignment of a called function.
ST_EMU_INTERNAL inline void start_fiber(Fiber& f, char* stack) {
    new_fiber(f, stack);
    uintptr_t top = ((uintptr_t)stack + STACK) & ~(uintptr_t)15;
    void** sp = (void**)(top - 16);
    sp[0] = (void*)&entry;
    sp[1] = nullptr;
    sp -= 7;
    for (int r = 1; r < 7; ++r) sp[r] = nullptr;
    uint32_t csr[2];
    asm volatile("stmxcsr %0" : "=m"(csr[0]));
    asm volatile("fnstcw %0" : "=m"(*(uint16_t*)&csr[1]));
    std::memcpy(sp, csr, 8);
    f.sp = sp;
}

ST_EMU_INTERNAL inline void resume(Fiber& f) { to_fiber(f); st_emu_switch(&sched_sp, f.sp); in_scheduler(); }

ST_EMU_INTERNAL inline void park(int why) {
    Fiber* f = cur;
    f->state = why;
#ifdef ST_EMU_TSAN
    void* sync = barrier_sync(*f, why);
    __tsan_release(sync);
#endif
    to_scheduler();
    st_emu_switch(&f->sp, sched_sp);
    in_fiber();
#ifdef ST_EMU_TSAN
    __tsan_acquire(sync);
#endif
}
#else
ST_EMU_INTERNAL inline void trampoline() {
    in_fiber();
#ifdef ST_EMU_TSAN
    __tsan_acquire(&block_start);
#endif
    body();
#ifdef ST_EMU_TSAN
    __tsan_release(&block_end);
#endif
    cur->state = DONE;
    to_scheduler();
}

ST_EMU_INTERNAL inline void start_fiber(Fiber& f, char* stack) {
    new_fiber(f, stack);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stack;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = &sched;
    makecontext(&f.ctx, (void (*)())trampoline, 0);
}

ST_EMU_INTERNAL inline void resume(Fiber& f) { to_fiber(f); swapcontext(&sched, &f.ctx); in_scheduler(); }

ST_EMU_INTERNAL inline void park(int why) {
    Fiber* f = cur;
    f->state = why;
#ifdef ST_EMU_TSAN
    void* sync = barrier_sync(*f, why);
    __tsan_release(sync);
#endif
    to_scheduler();
    swapcontext(&f->ctx, &sched);
    in_fiber();
#ifdef ST_EMU_TSAN
    __tsan_acquire(sync);
#endif
}
#endif

ST_EMU_INTERNAL inline unsigned lane() { return cur->tid.x & 31; }
ST_EMU_INTERNAL inline unsigned warp_base() { return cur->tid.x & ~31u; }

// Run one block to completion (every thread a fiber); false on a detected error.
ST_EMU_INTERNAL inline bool run_fibers(unsigned nthreads) {
    if (nthreads > 1024) { fail("blockDim.x > 1024"); return false; }
    fibers.assign(nthreads, Fiber());
    if (stacks.size() < nthreads * STRIDE) {  // a new pool: the old stacks are dead, not copied
        std::vector<char>().swap(stacks);     // (AddressSanitizer still marks their frames' redzones)
        stacks.resize(nthreads * STRIDE);
    }
#ifdef ST_EMU_TSAN
    __tsan_release(&block_start);
#endif
    for (unsigned i = 0; i < nthreads; ++i) {
        Fiber& f = fibers[i];
        f.tid = {i, 0, 0};
        start_fiber(f, stacks.data() + i * STRIDE);
        f.state = READY;
    }
    std::vector<unsigned> shuffled;
    for (;;) {
        bool ran = false;
        if (seed) shuffled = order(nthreads);
        for (unsigned k = 0; k < nthreads; ++k) {
            unsigned i = seed ? shuffled[k] : k;
            if (fibers[i].state == READY) {
                cur = &fibers[i];
                resume(fibers[i]);
                ran = true;
                if (!error.empty()) return false;
            }
        }
        unsigned done = 0, wait_block = 0;
        for (auto& f : fibers) { done += f.state == DONE; wait_block += f.state == WAIT_BLOCK; }
        if (done == nthreads) return true;
        bool released = false;
        for (unsigned w = 0; w < nthreads; w += 32) {
            unsigned n = nthreads - w < 32 ? nthreads - w : 32, waiting = 0, exited = 0;
            for (unsigned l = 0; l < n; ++l) {
                waiting += fibers[w + l].state == WAIT_WARP;
                exited += fibers[w + l].state == DONE;
            }
            if (waiting && waiting + exited == n) {
                if (exited) { fail("a warp shuffle/match with a full mask was reached after lanes of its warp exited"); return false; }
                for (unsigned l = 0; l < n; ++l) fibers[w + l].state = READY;
                released = true;
            }
        }
        if (!released && wait_block && wait_block + done == nthreads) {
            if (done) { fail("__syncthreads() was reached after other threads of the block exited"); return false; }
            for (auto& f : fibers) f.state = READY;
            released = true;
        }
        if (!released && !ran) { fail("deadlock: threads wait at different barriers"); return false; }
    }
}

#ifdef ST_EMU_TSAN
// Threads stopped inside the kernel never reached their release of block_end: released here as
// each of them (not instrumented, so that this loop's own accesses count as nobody's).
ST_EMU_INTERNAL inline void release_stopped() {
    void** t = tsan_fibers.data();
    const size_t n = tsan_fibers.size();
    for (size_t i = 0; i < n; ++i) { __tsan_switch_to_fiber(t[i], 1); __tsan_release(&block_end); }
    __tsan_switch_to_fiber(sched_tsan, 1);
}
#endif

ST_EMU_INTERNAL inline bool run_block(unsigned nthreads) {
    bool ok = run_fibers(nthreads);
#ifdef ST_EMU_TSAN
    if (!ok) release_stopped();
    __tsan_acquire(&block_end);
    if (!ok) {  // and their fibers' shadow stacks are not empty: new ones for the next launch
        for (void* t : tsan_fibers) __tsan_destroy_fiber(t);
        tsan_fibers.clear();
    }
#endif
    return ok;
}

template <typename F>
inline int launch(unsigned gx, unsigned bx, F f) {
    error.clear();
#ifdef ST_EMU_TSAN
    sched_tsan = __tsan_get_current_fiber();
#endif
    grid_dim = {gx, 1, 1};
    block_dim = {bx, 1, 1};
    body = f;
    for (unsigned b : order(gx)) {
        block_idx = {b, 0, 0};
        if (!run_block(bx)) return 1;
    }
    return 0;
}

template <typename T> struct Arg { static T get(void* p) { T v; std::memcpy(&v, p, sizeof(T)); return v; } };
template <typename... A, size_t... I>
inline void call(void (*f)(A...), void** args, std::index_sequence<I...>) { f(Arg<A>::get(args[I])...); }
template <typename... A>
inline int launch_kernel(void (*f)(A...), unsigned gx, unsigned bx, void** args) {
    return launch(gx, bx, [f, args]() { call(f, args, std::index_sequence_for<A...>{}); });
}

// warp exchange of any value of up to 16 bytes: write, barrier, read, barrier
template <typename T> ST_EMU_INTERNAL inline T exchange(T v, unsigned src_in_block) {
    static_assert(sizeof(T) <= 16, "exchange of a value wider than 16 bytes");
    std::memcpy(slots[cur->tid.x], &v, sizeof(T));
    park(WAIT_WARP);
    T r;
    std::memcpy(&r, slots[src_in_block], sizeof(T));
    park(WAIT_WARP);
    return r;
}
}  // namespace emu

#ifdef ST_EMU_TSAN
namespace emu { ST_EMU_INTERNAL inline emu_dim3 thread_idx() { return cur->tid; } }
#define threadIdx (::emu::thread_idx())
#else
#define threadIdx (::emu::cur->tid)
#endif
#define blockIdx (::emu::block_idx)
#define blockDim (::emu::block_dim)
#define gridDim (::emu::grid_dim)

inline void __syncthreads() { ::emu::park(::emu::WAIT_BLOCK); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::emu::park(::emu::WAIT_WARP); }

template <typename T> inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
    unsigned l = ::emu::lane(), seg = l / width * width;
    return ::emu::exchange(v, ::emu::warp_base() + seg + ((unsigned)src % width));
}
template <typename T> inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
    unsigned l = ::emu::lane();
    unsigned src = (l % width) + delta < (unsigned)width ? l + delta : l;
    return ::emu::exchange(v, ::emu::warp_base() + src);
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
    unsigned l = ::emu::lane();
    unsigned src = (l % width) >= delta ? l - delta : l;
    return ::emu::exchange(v, ::emu::warp_base() + src);
}
ST_EMU_INTERNAL inline unsigned __match_any_sync(unsigned, int v) {
    unsigned base = ::emu::warp_base();
    std::memcpy(::emu::slots[::emu::cur->tid.x], &v, sizeof v);
    ::emu::park(::emu::WAIT_WARP);
    unsigned mask = 0;
    for (unsigned l = 0; l < 32 && base + l < blockDim.x; ++l) {
        int o;
        std::memcpy(&o, ::emu::slots[base + l], sizeof o);
        if (o == v) mask |= 1u << l;
    }
    ::emu::park(::emu::WAIT_WARP);
    return mask;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(x); }

#ifdef ST_EMU_TSAN
// relaxed atomic read-modify-writes, as CUDA's: ThreadSanitizer sees them as atomic, not ordered
template <typename T, typename F> inline T emu_atomic(T* p, F f) {
    T o, n;
    __atomic_load(p, &o, __ATOMIC_RELAXED);
    do { n = f(o); } while (!__atomic_compare_exchange(p, &o, &n, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return o;
}
template <typename T> inline T atomicAdd(T* p, T v) { return emu_atomic(p, [v](T o) { return (T)(o + v); }); }
template <typename T> inline T atomicMin(T* p, T v) { return emu_atomic(p, [v](T o) { return v < o ? v : o; }); }
template <typename T> inline T atomicOr(T* p, T v) { return emu_atomic(p, [v](T o) { return (T)(o | v); }); }
template <typename T> inline T atomicCAS(T* p, T cmp, T v) {
    return emu_atomic(p, [cmp, v](T o) { return o == cmp ? v : o; });
}
#else
// fibers never run concurrently: atomics are plain read-modify-writes
template <typename T> inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> inline T atomicMin(T* p, T v) { T o = *p; if (v < o) *p = v; return o; }
template <typename T> inline T atomicOr(T* p, T v) { T o = *p; *p = o | v; return o; }
template <typename T> inline T atomicCAS(T* p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
#endif

inline float st_emu_half_to_float(unsigned short h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
    if (exp == 0) {
        if (mant == 0) { bits = sign; }
        else {
            int e = -1;
            do { ++e; mant <<= 1; } while (!(mant & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline unsigned short st_emu_float_to_half(float fin) {  // round to nearest even (F. Giesen)
    uint32_t f;
    std::memcpy(&f, &fin, 4);
    const uint32_t f32infty = 255u << 23, f16max = (127u + 16u) << 23;
    const uint32_t magic_u = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const uint32_t sign = f & 0x80000000u;
    unsigned short o;
    f ^= sign;
    if (f >= f16max) {
        o = f > f32infty ? 0x7e00 : 0x7c00;
    } else if (f < (113u << 23)) {
        float ff, magic;
        std::memcpy(&ff, &f, 4);
        std::memcpy(&magic, &magic_u, 4);
        ff += magic;
        std::memcpy(&f, &ff, 4);
        o = (unsigned short)(f - magic_u);
    } else {
        uint32_t odd = (f >> 13) & 1u;
        f += ((uint32_t)(15 - 127) << 23) + 0xfffu;
        f += odd;
        o = (unsigned short)(f >> 13);
    }
    return (unsigned short)(o | (sign >> 16));
}
'''

# -fwrapv: integer sums and products wrap, as on the GPU (NumPy's integer arithmetic)
_CXXFLAGS = ("-std=c++17", "-O2", "-g", "-fPIC", "-shared", "-w", "-fwrapv")
# The emulator's memcheck and racecheck (ci/emulator_sanitize.sh): with
# SPARSETENSOR_EMULATOR_SANITIZE=address the kernels are built under AddressSanitizer and every
# access is checked against the exact extent of its buffer, which the device then allocates one
# by one (posix_memalign, no slack); with =thread they are built under ThreadSanitizer, every
# thread of a block a fiber of its own, ordered only by the barriers, the end of its block and
# the atomics, so that two threads touching the same address between two barriers (one of them
# writing, not both atomically) are reported. The sanitizer's runtime must be loaded first
# (LD_PRELOAD).
_SANITIZE_FLAGS = {"address": ("-fsanitize=address", "-fno-omit-frame-pointer", "-DST_EMU_ASAN"),
                   "thread": ("-fsanitize=thread", "-DST_EMU_TSAN")}
_RUNTIME = {"address": "libasan", "thread": "libtsan"}


def sanitizing() -> str:
    """The sanitizer the kernels are built and run under ('address', 'thread'), or ''."""
    mode = os.environ.get("SPARSETENSOR_EMULATOR_SANITIZE", "")
    if mode and mode not in _SANITIZE_FLAGS:
        raise ValueError(f"SPARSETENSOR_EMULATOR_SANITIZE={mode!r}: the emulator knows 'address' and 'thread'")
    return mode


@functools.lru_cache(maxsize=None)
def _loaded(runtime: str) -> bool:
    with open("/proc/self/maps") as maps:
        return runtime in maps.read()


def _flags() -> tuple:
    mode = sanitizing()
    if not mode:
        return _CXXFLAGS
    if not _loaded(_RUNTIME[mode]):
        raise RuntimeError(f"SPARSETENSOR_EMULATOR_SANITIZE={mode} needs the sanitizer's runtime loaded "
                           f"first: LD_PRELOAD=$(c++ -print-file-name={_RUNTIME[mode]}.so) "
                           "(ci/emulator_sanitize.sh sets it)")
    return _CXXFLAGS + _SANITIZE_FLAGS[mode]


_lock = threading.Lock()
_libs: dict = {}


def compiler() -> str | None:
    """The host C++ compiler (``$CXX``, else c++/g++/clang++), or None."""
    for c in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


def _launchers(name: str):
    """(C++ source of the launchers, [(kernel, keys)] in launcher order)."""
    decls = _source.declarations(name)
    lines, order = [], []
    for k in decls.kernels:
        for keys in k.instances():
            expr = _source.name_expression(k, keys)
            lines.append(f'extern "C" int emu_launch_{len(order)}(unsigned gx, unsigned bx, void** args) '
                         f'{{ return ::emu::launch_kernel(&{expr}, gx, bx, args); }}')
            order.append((k.name, tuple(keys)))
    return "\n".join(lines), order


def build_library(name: str, cache_dir: Path | None = None):
    """Compile kernel file ``name`` for the host; returns ``(ctypes.CDLL, {(kernel, keys): function})``."""
    flags = _flags()
    with _lock:
        hit = _libs.get((name, flags))
        if hit is not None:
            return hit
        cxx = compiler()
        if cxx is None:
            raise RuntimeError("no C++ compiler for the kernel emulator (set $CXX)")
        launchers, order = _launchers(name)
        text = (PRELUDE + f'\n#include "{name}"\n' + "\n".join(
            f"// header {h}: {hashlib.sha256(b).hexdigest()}" for h, b in _source.included_headers(name).items()) + "\n"
            + launchers + '\nextern "C" const char* emu_error() { return ::emu::error.c_str(); }\n'
            + 'extern "C" void emu_set_seed(unsigned long long s) { ::emu::seed = s; }\n')
        digest = hashlib.sha256(text.encode() + _source.source(name) + " ".join(flags).encode()).hexdigest()[:16]
        base = Path(cache_dir or os.environ.get("SPARSETENSOR_EMULATOR_CACHE") or
                    Path(tempfile.gettempdir()) / f"sparsetensor-emulator-{os.getuid()}")
        base.mkdir(parents=True, exist_ok=True)
        so = base / f"{name}.{digest}.so"
        if not so.exists():
            src_dir = base / f"src-{digest}"
            src_dir.mkdir(exist_ok=True)
            for fname, data in list(_source.included_headers(name).items()) + [(name, _source.source(name))]:
                (src_dir / fname).write_bytes(data)
            (src_dir / "emu.cpp").write_text(text)
            tmp = so.with_suffix(f".{os.getpid()}.tmp")
            cmd = [cxx, *flags, "-I", str(src_dir),
                   str(src_dir / "emu.cpp"), "-o", str(tmp)]
            # the compiler runs without a sanitizer runtime this process was started under
            env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
            res = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if res.returncode:
                raise RuntimeError(f"emulator build of {name} failed:\n{res.stderr[-6000:]}")
            os.replace(tmp, so)
        lib = ctypes.CDLL(str(so))
        lib.emu_error.restype = ctypes.c_char_p
        lib.emu_set_seed.argtypes = [ctypes.c_ulonglong]
        funcs = {}
        for i, key in enumerate(order):
            f = getattr(lib, f"emu_launch_{i}")
            f.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
            f.restype = ctypes.c_int
            funcs[key] = f
        _libs[name, flags] = (lib, funcs)
        return _libs[name, flags]


class _HostBuffer:
    """Host memory standing in for a ``cuda.core.Buffer`` (its address is ``handle``)."""

    __slots__ = ("device", "handle", "nbytes", "_mem", "__weakref__")

    def __init__(self, device, nbytes):
        self.device = device
        self.nbytes = int(nbytes)
        self._mem, self.handle = None, 0
        if not self.nbytes:
            return
        # 256-byte aligned, like cuMemAllocAsync; filled with a pattern so reads of memory
        # a kernel never wrote do not look like zeros
        if sanitizing() == "address":  # exactly nbytes, so that AddressSanitizer sees a read one past the end
            ptr = ctypes.c_void_p()
            if _libc().posix_memalign(ctypes.byref(ptr), 256, self.nbytes):
                raise MemoryError(f"emulated allocation of {self.nbytes} bytes")
            self.handle = ptr.value
            self._mem = weakref.finalize(self, _libc().free, ptr)
            ctypes.memset(self.handle, 0xA5, self.nbytes)
        else:
            self._mem = np.full(self.nbytes + 256, 0xA5, np.uint8)
            self.handle = (self._mem.ctypes.data + 255) // 256 * 256


@functools.lru_cache(maxsize=None)
def _libc():
    lib = ctypes.CDLL(None)
    lib.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
    lib.free.argtypes = [ctypes.c_void_p]
    return lib


class EmulatedDevice:
    """Stands in for :class:`~sparsetensor.cuda._driver.Device`: host memory, emulated kernels.

    Install it as device 0 with :func:`install` (tests do), so that every
    ``sparsetensor.cuda`` function runs on it.
    """

    emulated = True

    def __init__(self, ordinal: int = 0, sm_count: int = 2, compute_capability=(9, 0), seed: int = 0):
        """``seed`` != 0 runs the blocks of a grid, and the threads of a block between two
        barriers, in a shuffled order (seeded), so that code relying on an order the GPU does
        not promise fails here too."""
        self.seed = int(seed)
        self.ordinal = ordinal
        self.sm_count = sm_count
        self.compute_capability = tuple(compute_capability)
        self.modules, self.functions = {}, {}
        self.launches = 0

    name = property(lambda self: f"cuda:{self.ordinal}")
    stream_handle = property(lambda self: 0x5EED)

    def activate(self):
        pass

    def synchronize(self):
        pass

    def alloc(self, nbytes):
        return _HostBuffer(self, nbytes)

    def memset8(self, ptr, value, nbytes):
        if nbytes:
            ctypes.memset(ptr, value, nbytes)

    def copy_htod(self, dst, host):
        if host.nbytes:
            ctypes.memmove(dst, host.ctypes.data, host.nbytes)

    def copy_dtoh(self, host, src):
        if host.nbytes:
            ctypes.memmove(host.ctypes.data, src, host.nbytes)

    def copy_dtod(self, dst, src, nbytes):
        if nbytes:
            ctypes.memmove(dst, src, nbytes)

    def wait_external_stream(self, handle):
        pass

    def view_cai(self, obj):
        """What ``cuda.core.utils.StridedMemoryView`` gives of a ``__cuda_array_interface__``
        array (ptr, shape, dtype, strides in elements), read here: cuda.core would ask the
        driver where an emulated (host) pointer lives."""
        cai = obj.__cuda_array_interface__
        dtype = np.dtype(cai["descr"]) if len(cai.get("descr") or ()) > 1 else np.dtype(cai["typestr"])
        strides = cai.get("strides")
        return SimpleNamespace(ptr=int(cai["data"][0]), shape=tuple(cai["shape"]), dtype=dtype,
                               device_id=self.ordinal,
                               strides=None if strides is None else tuple(s / dtype.itemsize for s in strides))

    def make_external_stream_wait(self, handle):
        pass

    def emulate(self, name, kernel, keys, grid, block, shared, params_address):
        gx, gy, gz = grid
        bx, by, bz = block
        if (gy, gz, by, bz) != (1, 1, 1, 1) or shared:
            raise NotImplementedError("the emulator runs 1-d grids and blocks without dynamic shared memory")
        if bx % 32:
            raise ValueError(f"block size {bx} is not a multiple of the warp size")
        lib, funcs = build_library(name)
        self.launches += 1
        if self.seed:
            lib.emu_set_seed(self.seed * 0x9E3779B97F4A7C15 % 2**64 + self.launches)
        else:
            lib.emu_set_seed(0)
        if funcs[(kernel, tuple(keys))](gx, bx, params_address):
            lib, _ = build_library(name)
            raise RuntimeError(f"emulated {name}:{kernel}{list(keys)}: {lib.emu_error().decode()}")


def install(device: EmulatedDevice | None = None) -> EmulatedDevice:
    """Make ``device`` (a new EmulatedDevice by default) sparsetensor's cuda:0."""
    from . import _driver

    dev = device or EmulatedDevice()
    _driver._devices[dev.ordinal] = dev
    return dev


def uninstall(device: EmulatedDevice) -> None:
    from . import _driver

    if _driver._devices.get(device.ordinal) is device:
        del _driver._devices[device.ordinal]
