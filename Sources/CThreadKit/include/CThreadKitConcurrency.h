// CThreadKitConcurrency: the entry points of libdispatch and of Swift's concurrency runtime that
// ThreadKit's Swift-concurrency interop uses (docs/Concurrency.md). Each is looked up once with
// dlsym, so ThreadKit links neither library: a process without them gets "not available" answers.
#ifndef CTHREADKIT_CONCURRENCY_H
#define CTHREADKIT_CONCURRENCY_H
#include <stdint.h>

/// libdispatch's main-queue wake-up handle, `_dispatch_get_main_queue_handle_4CF()`: on Linux an
/// eventfd that libdispatch writes when its main queue (which also holds Swift's main-actor jobs)
/// goes from idle to having work. -1 if libdispatch is not in the process.
int tk_dispatch_main_queue_handle(void);
/// Runs one batch of libdispatch's main queue on the calling thread, the main thread only:
/// `_dispatch_main_queue_callback_4CF(NULL)`. Returns 0, or -1 if libdispatch is not there.
int tk_dispatch_main_queue_drain(void);

/// The address of one of the Swift runtime's global-executor hook variables, by symbol name
/// ("swift_task_enqueueGlobal_hook", "…WithDelay_hook", "…WithDeadline_hook"); NULL if absent.
void *tk_swift_runtime_symbol(const char *name);
#endif
