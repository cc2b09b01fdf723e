// CThreadKit: the few Linux calls Swift cannot make itself (variadic syscall(2) for futex and
// gettid), plus tiny inline helpers that must compile to a single instruction (cpu_relax) or a
// thread-local load (the cached thread id). Nothing here holds state except that per-thread cache.
#ifndef CTHREADKIT_H
#define CTHREADKIT_H

#include <stdint.h>
#include <time.h>

/// Blocks while `*addr == expected` (FUTEX_WAIT_PRIVATE). `relative` is a relative timeout on
/// CLOCK_MONOTONIC, or NULL for none. Returns 0 when woken (possibly spuriously) or -errno:
/// -EAGAIN (the word no longer held `expected`), -ETIMEDOUT, -EINTR.
int tk_futex_wait(uint32_t *addr, uint32_t expected, const struct timespec *relative);

/// Wakes up to `count` threads blocked in tk_futex_wait on `addr`. Returns how many woke, or -errno.
int tk_futex_wake(uint32_t *addr, int count);

/// The kernel thread id of the calling thread. Called once per thread; see tk_current_tid.
uint32_t tk_tid_slow(void);

/// Per-thread cache of the kernel thread id (0 until first asked). Owned by its thread.
extern __thread uint32_t tk_tid_cache;

/// The calling thread's kernel thread id, from a thread-local cache: a TLS load on the fast path.
/// Linux thread ids fit in 22 bits (pid_max <= 2^22), which the lock words rely on.
static inline uint32_t tk_current_tid(void) {
    uint32_t tid = tk_tid_cache;
    return tid != 0 ? tid : tk_tid_slow();
}

/// The per-thread parking observer (an opaque, unretained pointer set by the thread pool for its
/// workers; NULL elsewhere). Read and written only by its own thread.
extern __thread void *tk_park_observer;
static inline void *tk_park_observer_get(void) { return tk_park_observer; }
static inline void tk_park_observer_set(void *observer) { tk_park_observer = observer; }

/// A spin-wait hint to the CPU (PAUSE on x86, YIELD on arm64): lets the sibling hyperthread run
/// and saves power while a lock word is polled.
static inline void tk_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
