// CThreadKit: syscall wrappers. See include/CThreadKit.h for the contract of each call.
#define _GNU_SOURCE
#include "CThreadKit.h"
#include <errno.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <string.h>
#include <unistd.h>

__thread uint32_t tk_tid_cache __attribute__((tls_model("initial-exec"))) = 0;
__thread void *tk_park_observer = NULL;

int tk_futex_wait(uint32_t *addr, uint32_t expected, const struct timespec *relative) {
    long r = syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, relative, NULL, 0);
    return r == 0 ? 0 : -errno;
}

int tk_futex_wake(uint32_t *addr, int count) {
    long r = syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
    return r >= 0 ? (int)r : -errno;
}

// A forked child inherits the parent thread's cache; its thread has a new id.
static void tk_reset_tid_after_fork(void) { tk_tid_cache = 0; }
static pthread_once_t tk_atfork_once = PTHREAD_ONCE_INIT;
static void tk_install_atfork(void) { pthread_atfork(NULL, NULL, tk_reset_tid_after_fork); }

uint32_t tk_tid_slow(void) {
    pthread_once(&tk_atfork_once, tk_install_atfork);
    tk_tid_cache = (uint32_t)syscall(SYS_gettid);
    return tk_tid_cache;
}

int tk_thread_set_name(pthread_t thread, const char *name) {
    return pthread_setname_np(thread, name);
}

int tk_backtrace(void **buffer, int size) {
    // Into a buffer of its own, then copied without this function's frame: a plain
    // `return backtrace(...)` may be a tail call in an optimized build and a frame in a debug one.
    void *frames[129];
    if (size > 128) size = 128;
    int n = backtrace(frames, size + 1);
    if (n <= 1) return 0;
    memcpy(buffer, frames + 1, (size_t)(n - 1) * sizeof(void *));
    return n - 1;
}

int tk_dladdr(const void *address, const char **image, void **base, const char **symbol, void **symbol_address) {
    Dl_info info;
    if (dladdr(address, &info) == 0) return 0;
    *image = info.dli_fname;
    *base = info.dli_fbase;
    *symbol = info.dli_sname;
    *symbol_address = info.dli_saddr;
    return 1;
}

size_t tk_current_stack_size(void) {
    pthread_attr_t attr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
    pthread_attr_getstacksize(&attr, &size);
    pthread_attr_destroy(&attr);
    return size;
}

int tk_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int tk_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event ev = { .events = events, .data.u64 = token };
    return epoll_ctl(epfd, op, fd, &ev);
}

int tk_epoll_wait(int epfd, uint64_t *tokens, uint32_t *events, int max, int timeout_ms) {
    struct epoll_event ready[64];
    if (max > 64) max = 64;
    int n = epoll_wait(epfd, ready, max, timeout_ms);
    for (int i = 0; i < n; i++) {
        tokens[i] = ready[i].data.u64;
        events[i] = ready[i].events;
    }
    return n;
}

int tk_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

int tk_timerfd(void) { return timerfd_create(CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC); }

int tk_timerfd_arm(int fd, int64_t seconds, int64_t nanoseconds) {
    struct itimerspec spec = { .it_interval = {0, 0}, .it_value = { (time_t)seconds, (long)nanoseconds } };
    return timerfd_settime(fd, 0, &spec, NULL);
}

int tk_set_timer_slack(unsigned long nanoseconds) { return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0); }
