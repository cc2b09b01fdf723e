// CThreadKitDumpSignal: the thread dump on a signal (docs/Diagnostics.md §6,
// `TK_DIAGNOSTICS=dump:SIGUSR2`). The signal handler does nothing but count the request and wake
// a dedicated thread (`tk.dump`) with a futex: the dump itself runs on that thread, which calls
// ThreadKit's `tk_thread_dump_on_signal` (a Swift function exported with @_cdecl). The handler and
// the thread are installed by a C constructor before `main` when TK_DIAGNOSTICS asks for `dump`,
// so the signal never kills a process that asked for dumps, whatever it has run yet; or later by
// TKDiagnostics.enable(.dumpOnSignal).
#ifndef CTHREADKIT_DUMP_SIGNAL_H
#define CTHREADKIT_DUMP_SIGNAL_H

#include <stdint.h>

/// Installs the handler for `signo` and starts the dump thread (once: a later call with another
/// signal changes nothing). Returns the signal handled, or -errno.
int tk_dump_signal_install(int signo);

/// The kernel id of the dump thread, 0 when none runs.
uint32_t tk_dump_signal_thread_id(void);

/// How many dumps the thread has finished (tests wait on it).
uint32_t tk_dump_signal_completed(void);

#endif
