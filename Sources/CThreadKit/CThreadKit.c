// CThreadKit: syscall wrappers. See include/CThreadKit.h for the contract of each call.
#define _GNU_SOURCE
#include "CThreadKit.h"
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread uint32_t tk_tid_cache = 0;
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
