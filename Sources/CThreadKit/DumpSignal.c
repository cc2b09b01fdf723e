// The thread dump on a signal (include/CThreadKitDumpSignal.h, docs/Diagnostics.md §6).
//
// Nothing is done in the signal handler but an atomic add and a futex wake, both async-signal-safe.
// The dump thread parks on `tk_dump_requests` and, each time it moves, calls the Swift side, which
// takes the dump (taking locks, allocating, sampling stacks: none of it allowed in a handler).
// Requests that arrive while a dump runs are folded into one more dump.
//
// Threads: `tk_dump_requests` is bumped by the handler (any thread) and read by the dump thread;
// `tk_dump_signo` and `tk_dump_tid` are written once under `tk_dump_lock` (the thread's id before
// install returns) and read by any thread; `tk_dump_completed` is bumped by the dump thread.
#define _GNU_SOURCE
#include "CThreadKitDumpSignal.h"
#include "CThreadKitDiagnostics.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/// ThreadKit's Swift side (DumpSignal.swift, @_cdecl). Weak: CThreadKit links without it.
extern void tk_thread_dump_on_signal(void) __attribute__((weak));

static uint32_t tk_dump_requests;
static uint32_t tk_dump_completed;
static uint32_t tk_dump_tid;
static int tk_dump_signo;
static pthread_mutex_t tk_dump_lock = PTHREAD_MUTEX_INITIALIZER;

static void tk_dump_handler(int signo) {
    (void)signo;
    int saved = errno;
    __atomic_add_fetch(&tk_dump_requests, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &tk_dump_requests, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    errno = saved;
}

static void *tk_dump_main(void *unused) {
    (void)unused;
    pthread_setname_np(pthread_self(), "tk.dump");
    __atomic_store_n(&tk_dump_tid, (uint32_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    syscall(SYS_futex, &tk_dump_tid, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    uint32_t seen = 0;
    for (;;) {
        uint32_t now = __atomic_load_n(&tk_dump_requests, __ATOMIC_ACQUIRE);
        if (now == seen) {
            syscall(SYS_futex, &tk_dump_requests, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
            continue;
        }
        seen = now;
        if (tk_thread_dump_on_signal != NULL) tk_thread_dump_on_signal();
        __atomic_add_fetch(&tk_dump_completed, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

int tk_dump_signal_install(int signo) {
    pthread_mutex_lock(&tk_dump_lock);
    int result = tk_dump_signo;
    if (result == 0) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        // Every signal blocked in the dump thread: it is never the one interrupted by the dump
        // signal, nor by a process-directed signal meant for the program.
        sigset_t all, previous;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &previous);
        pthread_t thread;
        int r = pthread_create(&thread, &attr, tk_dump_main, NULL);
        pthread_sigmask(SIG_SETMASK, &previous, NULL);
        pthread_attr_destroy(&attr);
        if (r != 0) {
            result = -r;
        } else {
            // Its id is known before install returns (TKThread.threadsNotStartedByThreadKit).
            while (__atomic_load_n(&tk_dump_tid, __ATOMIC_ACQUIRE) == 0) {
                syscall(SYS_futex, &tk_dump_tid, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
            }
            struct sigaction action;
            memset(&action, 0, sizeof action);
            action.sa_handler = tk_dump_handler;
            action.sa_flags = SA_RESTART;
            sigemptyset(&action.sa_mask);
            if (sigaction(signo, &action, NULL) != 0) {
                result = -errno;
            } else {
                tk_dump_signo = signo;
                result = signo;
            }
        }
    }
    pthread_mutex_unlock(&tk_dump_lock);
    return result;
}

uint32_t tk_dump_signal_thread_id(void) { return __atomic_load_n(&tk_dump_tid, __ATOMIC_ACQUIRE); }

uint32_t tk_dump_signal_completed(void) { return __atomic_load_n(&tk_dump_completed, __ATOMIC_ACQUIRE); }

/// TK_DIAGNOSTICS read again here (the parser is pure), so this constructor does not depend on
/// running after the one that sets the switch word.
__attribute__((constructor)) static void tk_dump_signal_init(void) {
    const char *value = getenv("TK_DIAGNOSTICS");
    if (value == NULL) return;
    tk_diagnostics_settings settings;
    tk_diagnostics_parse(value, &settings, NULL, 0);
    if (settings.off || (settings.features & TK_DIAG_DUMP) == 0 || settings.dump_signal == 0) return;
    (void)tk_dump_signal_install(settings.dump_signal);
}
