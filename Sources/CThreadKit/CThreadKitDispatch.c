// CThreadKitDispatch: the signal catcher and FIONREAD of dispatch sources. See
// include/CThreadKitDispatch.h. The counters and the wake fd are touched from signal handlers, so
// they are plain atomics; the saved actions are touched only by tk_signal_catch/restore, which the
// dispatch manager calls under its lock.
#define _GNU_SOURCE
#include "CThreadKitDispatch.h"
#include <errno.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define TK_NSIG 65

static uint64_t tk_signal_counts[TK_NSIG];
static int tk_signal_wake_fd = -1;
static struct sigaction tk_signal_saved[TK_NSIG];

void tk_signal_set_wake_fd(int fd) { __atomic_store_n(&tk_signal_wake_fd, fd, __ATOMIC_SEQ_CST); }

static void tk_signal_handler(int signo) {
    if (signo <= 0 || signo >= TK_NSIG) return;
    int saved = errno;
    __atomic_fetch_add(&tk_signal_counts[signo], 1, __ATOMIC_SEQ_CST);
    int fd = __atomic_load_n(&tk_signal_wake_fd, __ATOMIC_SEQ_CST);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(fd, &one, sizeof one);
        (void)r;
    }
    errno = saved;
}

int tk_signal_catch(int signo) {
    if (signo <= 0 || signo >= TK_NSIG) return EINVAL;
    struct sigaction action;
    action.sa_handler = tk_signal_handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (sigaction(signo, &action, &tk_signal_saved[signo]) != 0) return errno;
    return 0;
}

int tk_signal_restore(int signo) {
    if (signo <= 0 || signo >= TK_NSIG) return EINVAL;
    if (sigaction(signo, &tk_signal_saved[signo], NULL) != 0) return errno;
    return 0;
}

uint64_t tk_signal_take(int signo) {
    if (signo <= 0 || signo >= TK_NSIG) return 0;
    return __atomic_exchange_n(&tk_signal_counts[signo], 0, __ATOMIC_SEQ_CST);
}

int64_t tk_bytes_available(int fd) {
    int n = 0;
    if (ioctl(fd, FIONREAD, &n) != 0) return -1;
    return n;
}
