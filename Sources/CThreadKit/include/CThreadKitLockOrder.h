// CThreadKitLockOrder: the hot half of the lock-order checker (docs/Diagnostics.md §1) and the
// stack sampler of the hang watchdog (§2). Kept in C for two reasons: the per-thread held-lock
// stack is a plain `__thread` array (no key lookup), and the sampler's signal handler must be
// async-signal-safe, which Swift code cannot promise.
#ifndef CTHREADKIT_LOCKORDER_H
#define CTHREADKIT_LOCKORDER_H

#include <stdint.h>

// MARK: Lock order

/// How many locks one thread can hold at once and still be checked. Deeper holdings are counted
/// in `tk_lockorder_overflowed` and ignored (never a false report; possibly a missed one).
#define TK_HELD_LOCKS_MAX 32

/// What tk_lockorder_check found.
enum {
    TK_LOCKORDER_PUSHED = 0,    // every edge from the held locks to this one was known: pushed
    TK_LOCKORDER_REENTRY = 1,   // this thread holds the lock already: nothing pushed, no edge
    TK_LOCKORDER_NEW_EDGE = 2,  // at least one edge is new: the caller records it (slow path), then pushes
};

/// Checks an acquisition of lock `id` (nonzero) by the calling thread against the locks it holds.
/// `is_try`: a try-lock, which never waits, so it adds no edge (it is only pushed, as lockdep does).
int tk_lockorder_check(uint32_t id, int is_try);
/// Pushes `id` on the calling thread's held stack.
void tk_lockorder_push(uint32_t id, int is_try);
/// Removes the innermost entry for `id` (locks may be released out of order). No-op if absent.
void tk_lockorder_pop(uint32_t id);
/// The calling thread's held stack, outermost first (for the slow path).
uint32_t tk_lockorder_held_count(void);
uint32_t tk_lockorder_held_at(uint32_t index);

/// The known-edge cache: a fixed open-addressed set of (from, to) pairs, lock-free to read; its
/// writers (insert, remove) must be serialised by the caller (LockOrderGraph's mutex). `known`
/// returns 1 when the pair is in the set. `insert` returns 1 when newly added, 0 when already
/// present, -1 when the probe window is full of other edges (the caller's graph stays the
/// truth). `remove` (the edge's lock was freed) returns 1 when the pair was there, else 0.
int tk_lockorder_edge_known(uint32_t from, uint32_t to);
int tk_lockorder_edge_insert(uint32_t from, uint32_t to);
int tk_lockorder_edge_remove(uint32_t from, uint32_t to);
/// How many edges the cache holds now.
uint64_t tk_lockorder_edge_count(void);
/// Empties every thread's held stack (lazily, at its next acquisition): called when checking is
/// switched on, since the releases made while it was off were not seen.
void tk_lockorder_reset_all(void);
/// How many acquisitions went unchecked because a thread held more than TK_HELD_LOCKS_MAX locks.
uint64_t tk_lockorder_overflowed(void);

// MARK: Hang sampling

/// Installs the sampling signal handler (SIGRTMIN+6) once and warms backtrace() up (its first call
/// loads libgcc_s, which must not happen inside a signal handler). Returns the signal number, or
/// -errno.
int tk_hang_sampler_install(void);
/// Unblocks the sampling signal on the calling thread. Every ThreadKit thread calls it when it
/// starts: a thread inherits its creator's signal mask, and a pool worker started from a thread
/// that blocks every signal (libdispatch's workers, which run Swift concurrency's jobs, do) could
/// otherwise never be sampled.
void tk_hang_sampler_unblock_here(void);
/// Asks thread `tid` for its stack: stores the request, sends the signal with tgkill, returns 0
/// or -errno. The handler (on `tid`) fills the sampler's frame buffer, stores the frame count
/// (plus one) in `*done` and wakes it as a futex. One request at a time (the watchdog's).
int tk_hang_sample_request(uint32_t tid, uint32_t *done);
/// Ends the current request (after it completed or timed out): a late handler does nothing.
void tk_hang_sample_cancel(void);
/// The frames of the last completed sample (valid between a completion and the next request).
void *const *tk_hang_sample_frames(void);

/// The kernel's name for thread `tid` of this process (/proc/self/task/TID/comm), NUL-terminated in
/// `buffer`. Returns its length, or -errno (the thread is gone).
int tk_thread_name(uint32_t tid, char *buffer, int capacity);

#endif
