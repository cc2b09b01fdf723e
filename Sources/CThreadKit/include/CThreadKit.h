// CThreadKit: the few Linux calls Swift cannot make itself (variadic syscall(2) for futex and
// gettid), plus tiny inline helpers that must compile to a single instruction (cpu_relax) or a
// thread-local load (the cached thread id). Nothing here holds state except that per-thread cache.
#ifndef CTHREADKIT_H
#define CTHREADKIT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/socket.h>

// Dispatch sources: the signal catcher and FIONREAD (a header of its own).
#include "CThreadKitDispatch.h"
#include "CThreadKitConcurrency.h"
#include "CThreadKitDiagnostics.h"
#include "CThreadKitTrace.h"
#include "CThreadKitLockOrder.h"
#include "CThreadKitDumpSignal.h"

/// Blocks while `*addr == expected` (FUTEX_WAIT_PRIVATE). `relative` is a relative timeout on
/// CLOCK_MONOTONIC, or NULL for none. Returns 0 when woken (possibly spuriously) or -errno:
/// -EAGAIN (the word no longer held `expected`), -ETIMEDOUT, -EINTR.
int tk_futex_wait(uint32_t *addr, uint32_t expected, const struct timespec *relative);

/// Wakes up to `count` threads blocked in tk_futex_wait on `addr`. Returns how many woke, or -errno.
int tk_futex_wake(uint32_t *addr, int count);

/// The kernel thread id of the calling thread. Called once per thread; see tk_current_tid.
uint32_t tk_tid_slow(void);

/// Per-thread cache of the kernel thread id (0 until first asked). Owned by its thread.
/// Initial-exec: a load at a fixed offset from the thread pointer, not a __tls_get_addr call per
/// read (code built position-independent defaults to the general-dynamic model), which every
/// lock and unlock pays. ThreadKit is linked into the program, never dlopen'ed late.
extern __thread uint32_t tk_tid_cache __attribute__((tls_model("initial-exec")));

/// The calling thread's kernel thread id, from a thread-local cache: a TLS load on the fast path.
/// Linux thread ids fit in 22 bits (pid_max <= 2^22), which the lock words rely on.
static inline uint32_t tk_current_tid(void) {
    uint32_t tid = tk_tid_cache;
    return tid != 0 ? tid : tk_tid_slow();
}

/// epoll, eventfd and timerfd, wrapped so Swift never touches the packed `struct epoll_event`.
/// Each returns what the underlying call returns (-1 with errno set on failure).
int tk_epoll_create(void);
/// Registers (op 1 = add, 2 = delete, 3 = modify) `fd` for `events` (EPOLLIN = 1, EPOLLOUT = 4)
/// with `token` as its user data.
int tk_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token);
/// Waits up to `timeout_ms` (-1: forever, 0: poll) and stores each ready fd's token and events.
int tk_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms);
/// A non-blocking, close-on-exec eventfd counter.
int tk_eventfd(void);
/// A non-blocking, close-on-exec timerfd on CLOCK_BOOTTIME (the clock behind ContinuousClock).
int tk_timerfd(void);
/// Arms `fd` to expire once after `seconds` + `nanoseconds` (relative); both 0 disarms it.
int tk_timerfd_arm(int fd, int64_t seconds, int64_t nanoseconds);

/// prctl(PR_SET_TIMERSLACK, nanoseconds) for the calling thread (prctl is variadic).
int tk_set_timer_slack(unsigned long nanoseconds);

/// Linux scheduling policies that Swift's Glibc module hides (GNU extensions); values from
/// <linux/sched.h>.
#define TK_SCHED_BATCH 3
#define TK_SCHED_IDLE 5

/// pthread_setname_np (a GNU extension Swift's Glibc module may hide). `name` is at most 15
/// bytes plus NUL. Returns 0 or an errno value.
int tk_thread_set_name(pthread_t thread, const char *name);

/// The calling thread's stack size in bytes, from pthread_getattr_np; 0 if unknown.
size_t tk_current_stack_size(void);

/// backtrace(3) from <execinfo.h>, without this function's own frame: buffer[0] is the return
/// address into the caller. At most 128 frames. The capture of every diagnostics report
/// (CallStack.swift).
int tk_backtrace(void **buffer, int size);

/// dladdr(3): the image holding `address` (its path and base) and the exported symbol nearest
/// below it (NULL name and address when none). 0 when no image holds it. The strings belong to
/// the loader.
int tk_dladdr(const void *address, const char **image, void **base, const char **symbol, void **symbol_address);

/// The per-thread parking observer (an opaque, unretained pointer set by the thread pool for its
/// workers; NULL elsewhere). Read and written only by its own thread.
extern __thread void *tk_park_observer;
static inline void *tk_park_observer_get(void) { return tk_park_observer; }
static inline void tk_park_observer_set(void *observer) { tk_park_observer = observer; }

/// Atomic OR / AND on one byte of any memory (Swift's Atomic cannot be laid over memory it did
/// not allocate), for TKAtomicTestAndSet/Clear on byte buffers. Return the byte's old value.
/// `barrier` nonzero: sequentially consistent; zero: relaxed.
static inline uint8_t tk_atomic_fetch_or_u8(uint8_t *address, uint8_t mask, int barrier) {
    return barrier ? __atomic_fetch_or(address, mask, __ATOMIC_SEQ_CST) : __atomic_fetch_or(address, mask, __ATOMIC_RELAXED);
}
static inline uint8_t tk_atomic_fetch_and_u8(uint8_t *address, uint8_t mask, int barrier) {
    return barrier ? __atomic_fetch_and(address, mask, __ATOMIC_SEQ_CST) : __atomic_fetch_and(address, mask, __ATOMIC_RELAXED);
}

/// A spin-wait hint to the CPU (PAUSE on x86, YIELD on arm64): lets the sibling hyperthread run
/// and saves power while a lock word is polled.
static inline void tk_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}


/// Sockets for TKSocketPort (Sockets.c). Every descriptor is non-blocking and close-on-exec.
/// Each returns a descriptor (>= 0) or -errno; getaddrinfo failures return -EHOSTUNREACH after
/// storing gai's code in `*gai_error` when it is not NULL.
/// Listens on `host` (an IPv4/IPv6 literal or name) at `port` (0: any free port); the bound port
/// is stored in `*bound`.
int tk_tcp_listen(const char *host, uint16_t port, uint16_t *bound, int *gai_error);
/// tk_tcp_listen with a chosen listen(2) backlog.
int tk_tcp_listen_backlog(const char *host, uint16_t port, int backlog, uint16_t *bound, int *gai_error);
/// Resolves `host`:`port` (TCP; with `numeric_only`, only an IPv4/IPv6 literal, no lookup) into
/// at most `max` addresses in getaddrinfo's order. Returns how many, or -EHOSTUNREACH with gai's
/// code in `*gai_error`. May block (DNS) unless `numeric_only`.
int tk_resolve_addresses(const char *host, uint16_t port, int numeric_only, struct sockaddr_storage *addresses,
                         unsigned *lengths, int max, int *gai_error);
/// Starts a non-blocking TCP connect (TCP_NODELAY, close-on-exec) to one resolved address.
int tk_connect_address(const struct sockaddr_storage *address, unsigned length, int *in_progress);
/// Sets O_NONBLOCK and FD_CLOEXEC on `fd`: 0 or -errno.
int tk_set_nonblocking_cloexec(int fd);
/// recv(2) retrying EINTR: bytes read, 0 at end, or -errno.
long tk_recv(int fd, void *bytes, size_t count);
/// Listens on the Unix socket at `path` (which must not exist), the socket file set to `mode`
/// (chmod between bind and listen: the umask plays no part, and nobody can connect before the
/// mode is set).
int tk_unix_listen(const char *path, unsigned mode);
/// The credentials of the process at the other end of a connected Unix socket (SO_PEERCRED, as
/// of its connect): 0 or -errno.
int tk_peer_credentials(int fd, int *pid, unsigned *uid, unsigned *gid);
/// Starts connecting to `host`:`port`; `*in_progress` is set when the connect completes later
/// (wait for POLLOUT, then read tk_socket_error).
int tk_tcp_connect(const char *host, uint16_t port, int *in_progress, int *gai_error);
/// Starts connecting to the Unix socket at `path`.
int tk_unix_connect(const char *path, int *in_progress);
/// Whether `host` resolves: 0, or getaddrinfo's error code.
int tk_resolve(const char *host);
/// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC.
int tk_accept(int fd);
/// poll(2) on one descriptor: its revents (0 on timeout) or -errno. `timeout_ms` -1 waits forever.
int tk_poll1(int fd, short events, int timeout_ms);
/// The pending error of a socket (SO_ERROR), 0 if none.
int tk_socket_error(int fd);
/// send(2) with MSG_NOSIGNAL: a vanished peer is an EPIPE error, not a SIGPIPE.
long tk_send(int fd, const void *bytes, size_t count);
/// Whether a connection we only write to shows its peer gone: readable (EOF or data), hung up
/// or in error, seen without waiting.
int tk_peer_gone(int fd);
/// The poll(2) bits Swift's Glibc module does not export.
#define TK_POLLIN 0x001
#define TK_POLLOUT 0x004
#define TK_POLLERR 0x008
#define TK_POLLHUP 0x010
#define TK_POLLRDHUP 0x2000

#endif
