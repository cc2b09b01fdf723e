// The lock-order checker's per-thread held stack and known-edge cache, and the hang watchdog's
// stack sampler (include/CThreadKitLockOrder.h). The Swift side (Diagnostics/LockOrder.swift,
// Diagnostics/HangWatchdog.swift) owns the graph, the reports and the watchdog thread.
#define _GNU_SOURCE
#include "include/CThreadKitLockOrder.h"
#include <errno.h>
#include <execinfo.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

// MARK: Held stack (owned by its thread; never touched by another)

typedef struct {
    uint32_t ids[TK_HELD_LOCKS_MAX];
    uint32_t count;
    uint32_t overflow; // pushes beyond the array, matched by pops before any real entry is popped
    uint32_t epoch;    // tk_lockorder_epoch when this stack was last valid
} tk_held_locks;

static __thread tk_held_locks tk_held;
static uint64_t tk_overflowed = 0; // relaxed counter, statistics only
// Bumped when checking is switched on: releases were not seen while it was off, so every thread's
// stack is stale and starts again empty (relaxed: a thread that sees the bump late only checks a
// few more acquisitions against a stack that was right for it).
static uint32_t tk_epoch = 0;

void tk_lockorder_reset_all(void) { __atomic_fetch_add(&tk_epoch, 1, __ATOMIC_RELAXED); }

static inline tk_held_locks *tk_held_current(void) {
    tk_held_locks *h = &tk_held;
    uint32_t epoch = __atomic_load_n(&tk_epoch, __ATOMIC_RELAXED);
    if (h->epoch != epoch) {
        h->epoch = epoch;
        h->count = 0;
        h->overflow = 0;
    }
    return h;
}

int tk_lockorder_check(uint32_t id, int is_try) {
    tk_held_locks *h = tk_held_current();
    int fresh = 0;
    for (uint32_t i = 0; i < h->count; i++) {
        uint32_t held = h->ids[i];
        if (held == id) return TK_LOCKORDER_REENTRY;
        if (!is_try && !fresh && !tk_lockorder_edge_known(held, id)) fresh = 1;
    }
    if (fresh) return TK_LOCKORDER_NEW_EDGE;
    tk_lockorder_push(id, is_try);
    return TK_LOCKORDER_PUSHED;
}

void tk_lockorder_push(uint32_t id, int is_try) {
    (void)is_try; // a try-acquired lock is held like any other: later acquisitions order after it
    tk_held_locks *h = tk_held_current();
    if (h->overflow > 0 || h->count == TK_HELD_LOCKS_MAX) {
        h->overflow++;
        __atomic_fetch_add(&tk_overflowed, 1, __ATOMIC_RELAXED);
        return;
    }
    h->ids[h->count++] = id;
}

void tk_lockorder_pop(uint32_t id) {
    tk_held_locks *h = tk_held_current();
    for (uint32_t i = h->count; i > 0; i--) {
        if (h->ids[i - 1] != id) continue;
        memmove(&h->ids[i - 1], &h->ids[i], (h->count - i) * sizeof(uint32_t));
        h->count--;
        return;
    }
    // Not in the array: an acquisition pushed past its end (or taken while checking was off).
    if (h->overflow > 0) h->overflow--;
}

uint32_t tk_lockorder_held_count(void) { return tk_held_current()->count; }
uint32_t tk_lockorder_held_at(uint32_t index) {
    tk_held_locks *h = tk_held_current();
    return index < h->count ? h->ids[index] : 0;
}
uint64_t tk_lockorder_overflowed(void) { return __atomic_load_n(&tk_overflowed, __ATOMIC_RELAXED); }

// MARK: Known-edge cache (read by any thread; changed under the graph's mutex)

// 2^16 slots of 8 bytes (512 KiB of zero pages, touched only as edges arrive), open addressing
// with linear probing over a window of 32 slots. A slot holds one of:
//
//   0                  empty: ends every probe sequence that reaches it
//   TK_EDGE_TOMBSTONE  an edge that was removed (its lock was freed): probes go past it, an
//                      insertion may reuse it
//   (from << 32) | to  a known edge (ids are nonzero, so no edge is 0 or the tombstone)
//
// Readers take no lock; insertions and removals are serialised by the caller (the Swift graph's
// mutex), so a key is never stored twice. Invariant readers rely on: between a key's home slot
// and the slot holding it there is no 0. A removal writes a tombstone, then turns tombstones back
// into 0 from the end of a run backwards (only when the next slot is 0), which keeps the
// invariant at every single store, so a concurrent reader either finds the key or rightly
// misses it. Without removals the table filled for good with the edges of dead locks (every new
// edge then took the slow path).
#define TK_EDGE_BITS 16
#define TK_EDGE_MASK ((1u << TK_EDGE_BITS) - 1)
#define TK_EDGE_PROBES 32
#define TK_EDGE_TOMBSTONE 1ull
static uint64_t tk_edges[1u << TK_EDGE_BITS];
static uint64_t tk_edge_count = 0; // keys present; written under the graph's mutex, read relaxed

static inline uint32_t tk_edge_slot(uint64_t key) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - TK_EDGE_BITS));
}

int tk_lockorder_edge_known(uint32_t from, uint32_t to) {
    uint64_t key = ((uint64_t)from << 32) | to;
    uint32_t slot = tk_edge_slot(key);
    for (int probe = 0; probe < TK_EDGE_PROBES; probe++) {
        // Acquire: pairs with the releasing store of the key in tk_lockorder_edge_insert, which
        // the Swift side makes only after the edge is in its graph.
        uint64_t seen = __atomic_load_n(&tk_edges[(slot + probe) & TK_EDGE_MASK], __ATOMIC_ACQUIRE);
        if (seen == key) return 1;
        if (seen == 0) return 0;
    }
    return 0;
}

int tk_lockorder_edge_insert(uint32_t from, uint32_t to) {
    uint64_t key = ((uint64_t)from << 32) | to;
    uint32_t slot = tk_edge_slot(key);
    uint64_t *free_cell = NULL;
    for (int probe = 0; probe < TK_EDGE_PROBES; probe++) {
        uint64_t *cell = &tk_edges[(slot + probe) & TK_EDGE_MASK];
        uint64_t seen = __atomic_load_n(cell, __ATOMIC_RELAXED); // only writers (serialised) store
        if (seen == key) return 0;
        if (seen == TK_EDGE_TOMBSTONE) {
            if (free_cell == NULL) free_cell = cell;
            continue;
        }
        if (seen == 0) {
            if (free_cell == NULL) free_cell = cell;
            break;
        }
    }
    if (free_cell == NULL) return -1;
    // Release: publishes the graph update made before the insert to threads that find the key.
    __atomic_store_n(free_cell, key, __ATOMIC_RELEASE);
    __atomic_store_n(&tk_edge_count, __atomic_load_n(&tk_edge_count, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    return 1;
}

int tk_lockorder_edge_remove(uint32_t from, uint32_t to) {
    uint64_t key = ((uint64_t)from << 32) | to;
    uint32_t slot = tk_edge_slot(key);
    for (int probe = 0; probe < TK_EDGE_PROBES; probe++) {
        uint32_t index = (slot + probe) & TK_EDGE_MASK;
        uint64_t seen = __atomic_load_n(&tk_edges[index], __ATOMIC_RELAXED);
        if (seen == 0) return 0;
        if (seen != key) continue;
        // Relaxed: a reader that still sees the key takes the edge of a freed lock as known,
        // which checks nothing wrongly (the freed lock is never acquired again).
        __atomic_store_n(&tk_edges[index], TK_EDGE_TOMBSTONE, __ATOMIC_RELAXED);
        __atomic_store_n(&tk_edge_count, __atomic_load_n(&tk_edge_count, __ATOMIC_RELAXED) - 1, __ATOMIC_RELAXED);
        // A tombstone followed by an empty slot ends no probe sequence that needs it: empty it,
        // and the tombstones before it in turn.
        while (__atomic_load_n(&tk_edges[index], __ATOMIC_RELAXED) == TK_EDGE_TOMBSTONE &&
               __atomic_load_n(&tk_edges[(index + 1) & TK_EDGE_MASK], __ATOMIC_RELAXED) == 0) {
            __atomic_store_n(&tk_edges[index], 0, __ATOMIC_RELAXED);
            index = (index - 1) & TK_EDGE_MASK;
        }
        return 1;
    }
    return 0;
}

uint64_t tk_lockorder_edge_count(void) { return __atomic_load_n(&tk_edge_count, __ATOMIC_RELAXED); }

// MARK: Hang sampling

#define TK_SAMPLE_FRAMES 64
static void *tk_sample_frames[TK_SAMPLE_FRAMES];
static uint32_t tk_sample_tid = 0;        // the thread asked; 0: no request (handler does nothing)
static uint32_t *tk_sample_done = NULL;   // futex word of the request
static int tk_sample_signal = 0;

static void tk_hang_handler(int signo) {
    (void)signo;
    int saved = errno;
    uint32_t self = (uint32_t)syscall(SYS_gettid);
    if (__atomic_load_n(&tk_sample_tid, __ATOMIC_ACQUIRE) == self) {
        uint32_t *done = __atomic_load_n(&tk_sample_done, __ATOMIC_ACQUIRE);
        // backtrace() is not on the async-signal-safe list; it is in practice once warmed up (its
        // libgcc_s is loaded by tk_hang_sampler_install), which is the caveat docs/Diagnostics.md §2 states.
        int n = backtrace(tk_sample_frames, TK_SAMPLE_FRAMES);
        if (done != NULL && __atomic_exchange_n(&tk_sample_tid, 0, __ATOMIC_ACQ_REL) == self) {
            __atomic_store_n(done, (uint32_t)(n + 1), __ATOMIC_RELEASE);
            syscall(SYS_futex, done, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        }
    }
    errno = saved;
}

int tk_hang_sampler_install(void) {
    if (tk_sample_signal != 0) return tk_sample_signal;
    void *warm[4];
    (void)backtrace(warm, 4);
    int signo = SIGRTMIN + 6;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = tk_hang_handler;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(signo, &action, NULL) != 0) return -errno;
    tk_sample_signal = signo;
    return signo;
}

void tk_hang_sampler_unblock_here(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN + 6);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

int tk_hang_sample_request(uint32_t tid, uint32_t *done) {
    if (tk_sample_signal == 0) return -EINVAL;
    __atomic_store_n(&tk_sample_done, done, __ATOMIC_RELEASE);
    __atomic_store_n(&tk_sample_tid, tid, __ATOMIC_RELEASE);
    if (syscall(SYS_tgkill, getpid(), tid, tk_sample_signal) != 0) {
        int e = errno;
        tk_hang_sample_cancel();
        return -e;
    }
    return 0;
}

void tk_hang_sample_cancel(void) {
    __atomic_store_n(&tk_sample_tid, 0, __ATOMIC_RELEASE);
}

void *const *tk_hang_sample_frames(void) { return tk_sample_frames; }

// MARK: Thread names (slow paths only: a report names the threads it mentions)

int tk_thread_name(uint32_t tid, char *buffer, int capacity) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%u/comm", tid);
    FILE *file = fopen(path, "re");
    if (file == NULL) return -errno;
    size_t n = fread(buffer, 1, (size_t)(capacity - 1), file);
    fclose(file);
    while (n > 0 && (buffer[n - 1] == '\n' || buffer[n - 1] == '\0')) n--;
    buffer[n] = '\0';
    return (int)n;
}
