// CThreadKitDispatch: the signal catcher and FIONREAD of dispatch sources. See
// include/CThreadKitDispatch.h. The counters and the wake fd are touched from signal handlers, so
// they are plain atomics; the saved actions are touched only by tk_signal_catch/restore, which the
// dispatch manager calls under its lock.
#define _GNU_SOURCE
#include "CThreadKitDispatch.h"
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TK_NSIG 65

__thread void *tk_pool_worker = NULL;

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

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int tk_pidfd_open(int pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

int tk_inotify_init(void) { return inotify_init1(IN_NONBLOCK | IN_CLOEXEC); }

int tk_inotify_watch(int ifd, const char *path) {
    return inotify_add_watch(ifd, path, IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF
                             | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO);
}

int tk_inotify_unwatch(int ifd, int wd) { return inotify_rm_watch(ifd, wd); }

int tk_inotify_read(int ifd, int32_t *wds, uint32_t *masks, int max) {
    // 4096 bytes hold one event with the longest name, or at most 256 events without one (16
    // bytes each): with max >= 256 nothing read is ever dropped.
    char buffer[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n = read(ifd, buffer, sizeof buffer);
    if (n <= 0) return 0;
    int count = 0;
    for (char *p = buffer; p < buffer + n && count < max; ) {
        struct inotify_event *ev = (struct inotify_event *)p;
        wds[count] = ev->wd;
        masks[count] = ev->mask | (ev->len > 0 ? TK_INOTIFY_NAMED : 0);
        count++;
        p += sizeof(struct inotify_event) + ev->len;
    }
    return count;
}

int tk_fd_size_links(int fd, int64_t *size, uint64_t *links) {
    struct stat st;
    if (fstat(fd, &st) != 0) return -1;
    *size = st.st_size;
    *links = st.st_nlink;
    return 0;
}

/* The mask of the calling thread in a set big enough for the kernel's CPU count (EINVAL: too
 * small, so double it). Returns the set (free with CPU_FREE) and its size, or NULL. */
static cpu_set_t *tk_affinity_get(size_t *size_out, int *cpus_out) {
    for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
        cpu_set_t *set = CPU_ALLOC(cpus);
        if (set == NULL) return NULL;
        size_t size = CPU_ALLOC_SIZE(cpus);
        if (sched_getaffinity(0, size, set) == 0) {
            *size_out = size;
            *cpus_out = cpus;
            return set;
        }
        CPU_FREE(set);
        if (errno != EINVAL) return NULL;
    }
    return NULL;
}

int tk_affinity_count(void) {
    size_t size;
    int cpus;
    cpu_set_t *set = tk_affinity_get(&size, &cpus);
    if (set == NULL) return -1;
    int count = CPU_COUNT_S(size, set);
    CPU_FREE(set);
    return count;
}

int tk_affinity_keep_first(int n) {
    size_t size;
    int cpus;
    cpu_set_t *set = tk_affinity_get(&size, &cpus);
    if (set == NULL) return -1;
    cpu_set_t *kept = CPU_ALLOC(cpus);
    if (kept == NULL) { CPU_FREE(set); return -1; }
    CPU_ZERO_S(size, kept);
    int count = 0;
    for (int cpu = 0; cpu < cpus && count < n; cpu++) {
        if (CPU_ISSET_S(cpu, size, set)) { CPU_SET_S(cpu, size, kept); count++; }
    }
    int rc = sched_setaffinity(0, size, kept);
    CPU_FREE(kept);
    CPU_FREE(set);
    return rc == 0 ? count : -1;
}

int tk_syscall_changes_address_space(long number) {
    switch (number) {
#ifdef SYS_mmap
    case SYS_mmap:
#endif
#ifdef SYS_mmap2
    case SYS_mmap2:
#endif
#ifdef SYS_brk
    case SYS_brk:
#endif
    case SYS_munmap:
    case SYS_mprotect:
    case SYS_mremap:
    case SYS_madvise:
        return 1;
    default:
        return 0;
    }
}
