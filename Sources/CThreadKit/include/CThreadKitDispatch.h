// CThreadKitDispatch: what dispatch sources need from C (SPEC §6): a process-wide signal catcher
// whose handler only counts and writes an eventfd (both async-signal-safe), and FIONREAD.
#ifndef CTHREADKIT_DISPATCH_H
#define CTHREADKIT_DISPATCH_H

#include <stdint.h>

/// Where the signal handler writes (an eventfd of the dispatch manager); -1: nowhere.
void tk_signal_set_wake_fd(int fd);

/// Catches `signo` for the process (sigaction with SA_RESTART): its default action no longer
/// applies; each delivery is counted and the wake fd written. The previous action is saved.
/// Returns 0 or an errno value (EINVAL for SIGKILL, SIGSTOP or an invalid number).
int tk_signal_catch(int signo);

/// Restores the action saved by tk_signal_catch. Returns 0 or an errno value.
int tk_signal_restore(int signo);

/// The number of deliveries of `signo` since the last call (and resets it to 0).
uint64_t tk_signal_take(int signo);

/// Bytes available to read on `fd` (ioctl FIONREAD), or -1 with errno set.
int64_t tk_bytes_available(int fd);

/// pidfd_open(2): a descriptor that becomes readable when process `pid` exits, or -1 with errno
/// set (ESRCH: no such process; ENOSYS: a kernel older than 5.3).
int tk_pidfd_open(int pid);

/// An inotify instance (non-blocking, close-on-exec), or -1 with errno set.
int tk_inotify_init(void);

/// inotify_add_watch(2) of `path` for the events a file-system object source maps (modify,
/// attrib, move-self, delete-self; for a directory its entries created, deleted or moved; unmount
/// and ignored always come). Returns the watch descriptor
/// or -1 with errno set.
int tk_inotify_watch(int ifd, const char *path);

/// inotify_rm_watch(2). Returns 0 or -1 with errno set.
int tk_inotify_unwatch(int ifd, int wd);

/// Set in a mask read by tk_inotify_read when the event names an entry of a watched directory.
#define TK_INOTIFY_NAMED 0x80000000u

/// Reads pending inotify events of `ifd` into `wds`/`masks`; returns how many (0 when none is
/// pending). Pass max >= 256: one read then never holds more events than fit.
int tk_inotify_read(int ifd, int32_t *wds, uint32_t *masks, int max);

/// Size and link count of `fd` (fstat); returns 0, or -1 with errno set.
int tk_fd_size_links(int fd, int64_t *size, uint64_t *links);

/// CPUs in the calling thread's affinity mask (sched_getaffinity; masks of any size), or -1 with
/// errno set. The dispatch pool's width (docs/DispatchPool.md, "Width").
int tk_affinity_count(void);

/// Restricts the calling thread (and the threads and processes it creates later) to the first `n`
/// CPUs of its affinity mask; returns how many it kept, or -1 with errno set. For tests.
int tk_affinity_keep_first(int n);

/// Whether system call `number` (this architecture's numbering) maps, unmaps or protects memory:
/// mmap, mmap2, munmap, mprotect, mremap, madvise, brk. A thread asleep in one waits for its
/// address space's lock, which every thread start takes too (the pool's monitor does not count it
/// blocked).
int tk_syscall_changes_address_space(long number);

/// The dispatch pool worker running on this thread (an opaque, unretained PoolWorker set by the
/// worker for its own thread's lifetime; NULL on other threads). Read and written only by its own
/// thread: a submission made on a worker may go to that worker's local queue.
extern __thread void *tk_pool_worker;
static inline void *tk_pool_worker_get(void) { return tk_pool_worker; }
static inline void tk_pool_worker_set(void *worker) { tk_pool_worker = worker; }

#endif
