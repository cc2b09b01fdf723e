// CThreadKitDiagnostics: the one word that says which diagnostics are on (docs/Diagnostics.md).
// It lives in C so that it is initialised before any Swift code runs (a constructor reads
// TK_DIAGNOSTICS) and so that every hook in the library reads it with one relaxed load and a
// branch: no lazy-global once check in front of it.
#ifndef CTHREADKIT_DIAGNOSTICS_H
#define CTHREADKIT_DIAGNOSTICS_H

#include <stddef.h>
#include <stdint.h>

/// Feature bits of tk_diagnostics_word. Keep in step with DiagnosticsFeature in Swift.
enum {
    TK_DIAG_LOCK_ORDER = 1u << 0,       // record lock order, report cycles (docs/Diagnostics.md §1)
    TK_DIAG_LOCK_ORDER_FATAL = 1u << 1, // ... and stop the process at the first cycle
    TK_DIAG_HANGS = 1u << 2,            // watchdog samples long passes / items (§2)
    TK_DIAG_CONTENTION = 1u << 3,       // per-lock and per-queue wait counters (§3)
    TK_DIAG_TRACE = 1u << 4,            // the ring-buffered trace recorder (§4)
    TK_DIAG_BLOCKING = 1u << 5,         // report blocking waits where they starve something (§5)
    TK_DIAG_BLOCKING_FATAL = 1u << 6,   // ... and stop the process at the first one
    TK_DIAG_WAITS = 1u << 7,            // record who waits for whom, for thread dumps (§6)
    TK_DIAG_DUMP = 1u << 8,             // a thread dump on a chosen signal (§6)
    TK_DIAG_FLIGHT = 1u << 9,           // the trace kept as a bounded flight recorder (§7)
    TK_DIAG_METRICS = 1u << 10,         // sampled latency / depth metrics for ThreadKitMetrics (§8)
};

/// Which diagnostics are on. Written by the constructor (from TK_DIAGNOSTICS) and by the Swift API
/// (TKDiagnostics.enable/disable); read by every hook. Relaxed is enough for readers: a hook that
/// sees a bit late only misses events from the instant the switch flipped, and each feature's own
/// data is published by its own locks or atomics, never by this word.
extern uint32_t tk_diagnostics_word;

static inline uint32_t tk_diagnostics_load(void) {
    return __atomic_load_n(&tk_diagnostics_word, __ATOMIC_RELAXED);
}

/// Replaces the word with `desired` if it still holds `expected` (the read-modify-write of
/// DiagnosticsSwitch.update: TKDiagnostics and TKTrace change different bits concurrently).
static inline _Bool tk_diagnostics_compare_exchange(uint32_t expected, uint32_t desired) {
    return __atomic_compare_exchange_n(&tk_diagnostics_word, &expected, desired, 0,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/// The TK_DIAGNOSTICS value the process started with (NULL when unset): the Swift side parses
/// its arguments (thresholds such as `hangs:250ms`) from it.
const char *tk_diagnostics_environment(void);

/// What a TK_DIAGNOSTICS value asks for (tk_diagnostics_parse).
typedef struct {
    uint32_t features;          // TK_DIAG_* bits of the items understood
    uint32_t off;               // nonzero: `off` or `none` was given (everything off, the debug default too)
    uint64_t hang_threshold_ns; // the last valid `hangs:DURATION`; 0 when none was given
    uint32_t rejected;          // items not understood; none of their features is in `features`
    int32_t dump_signal;        // the signal of the last valid `dump[:SIGNAL]` (SIGUSR2 when none named); 0 when none
    uint64_t flight_window_ns;  // the last valid `flight[:DURATION]` (30 s when none named); 0 when none
} tk_diagnostics_settings;

/// Parses a TK_DIAGNOSTICS value (the grammar is in Diagnostics.c). Pure: reads only its
/// arguments. When `warnings` is not NULL, writes there (NUL-terminated, cut at `size` bytes) one
/// line per rejected item naming it, why, and the accepted forms.
void tk_diagnostics_parse(const char *text, tk_diagnostics_settings *out, char *warnings, size_t size);

#endif
