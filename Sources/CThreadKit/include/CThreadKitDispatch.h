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

#endif
