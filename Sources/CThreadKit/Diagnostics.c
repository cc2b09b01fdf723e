// The diagnostics switch (include/CThreadKitDiagnostics.h): the word, the constructor that sets
// its feature bits from TK_DIAGNOSTICS before main runs, and the one parser of that variable
// (tk_diagnostics_parse), which DiagnosticsConfiguration.swift calls too for the hang threshold.
//
// Grammar: items separated by commas; spaces (any isspace byte) around an item and around its
// ':' are ignored, names and options are read in any case; empty items are skipped. An item that
// is not understood — an unknown name, an option its name does not take, a bad duration —
// enables nothing at all and is named on standard error, once, by the constructor.
#include "include/CThreadKitDiagnostics.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <unistd.h>

uint32_t tk_diagnostics_word = 0;
static const char *tk_diagnostics_env = NULL;

const char *tk_diagnostics_environment(void) { return tk_diagnostics_env; }

static int tk_is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/// [*start, *end) without the spaces around it.
static void tk_trim(const char **start, const char **end) {
    while (*start < *end && tk_is_space(**start)) (*start)++;
    while (*end > *start && tk_is_space((*end)[-1])) (*end)--;
}

/// Whether [start, end) is `word` in any case (ASCII).
static int tk_is(const char *start, const char *end, const char *word) {
    size_t length = strlen(word);
    return (size_t)(end - start) == length && strncasecmp(start, word, length) == 0;
}

/// `250ms`, `2s`, `500us`, `500µs`, `1.5s`, `750` (milliseconds), `250 ms`: nanoseconds, or 0 when
/// not a duration of at least 1 ns and under 10^18 ns.
static uint64_t tk_duration(const char *start, const char *end) {
    double value = 0, scale = 1;
    int digits = 0, point = 0;
    const char *p = start;
    for (; p < end; p++) {
        if (*p >= '0' && *p <= '9') {
            if (point) { scale /= 10; value += (*p - '0') * scale; }
            else value = value * 10 + (*p - '0');
            digits++;
        } else if (*p == '.' && !point) {
            point = 1;
        } else {
            break;
        }
    }
    if (digits == 0 || digits > 30) return 0;
    const char *unit = p, *unit_end = end;
    tk_trim(&unit, &unit_end);
    double ns;
    if (unit == unit_end || tk_is(unit, unit_end, "ms")) ns = value * 1e6;
    else if (tk_is(unit, unit_end, "s")) ns = value * 1e9;
    else if (tk_is(unit, unit_end, "us") || tk_is(unit, unit_end, "\xC2\xB5s") || tk_is(unit, unit_end, "\xCE\xBCs")) ns = value * 1e3;
    else if (tk_is(unit, unit_end, "ns")) ns = value;
    else return 0;
    if (!(ns >= 1) || !(ns < 1e18)) return 0;
    return (uint64_t)ns;
}

/// `SIGUSR2`, `usr2`, `SIGQUIT`, `12`, `35`: a signal the thread dump may take, or 0 (`*shutdown` set
/// when it is one the system or a terminal sends to end the process). Taking a signal changes what
/// it does to the process, so only signals whose taking stops nothing are accepted: SIGUSR1,
/// SIGUSR2, SIGQUIT (the JVM's thread-dump signal), SIGWINCH, SIGPWR and the real-time signals
/// SIGRTMIN..SIGRTMAX (by number) but SIGRTMIN+6, the hang watchdog's sampling signal. Refused:
/// SIGTERM, SIGINT and SIGHUP (the process would survive `kill`, Ctrl-C, a closed terminal),
/// SIGKILL and SIGSTOP (cannot be caught), the faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
/// SIGABRT, SIGSYS), job control (SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT) and the signals the system
/// or libraries use (SIGCHLD, SIGPIPE, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGURG,
/// SIGIO, SIGSTKFLT; glibc's own 32 and 33).
static int tk_signal(const char *start, const char *end, int *shutdown) {
    *shutdown = 0;
    if (end - start > 3 && strncasecmp(start, "SIG", 3) == 0) start += 3;
    static const struct { const char *name; int number; } names[] = {
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"QUIT", SIGQUIT}, {"WINCH", SIGWINCH}, {"PWR", SIGPWR},
    };
    static const char *const shutdown_names[] = {"TERM", "INT", "HUP"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (tk_is(start, end, names[i].name)) return names[i].number;
    for (size_t i = 0; i < sizeof shutdown_names / sizeof shutdown_names[0]; i++)
        if (tk_is(start, end, shutdown_names[i])) {
            *shutdown = 1;
            return 0;
        }
    int number = 0, digits = 0;
    for (const char *p = start; p < end; p++) {
        if (*p < '0' || *p > '9' || ++digits > 3) return 0;
        number = number * 10 + (*p - '0');
    }
    if (digits == 0) return 0;
    if (number == SIGTERM || number == SIGINT || number == SIGHUP) {
        *shutdown = 1;
        return 0;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (number == names[i].number) return number;
    if (number >= SIGRTMIN && number <= SIGRTMAX && number != SIGRTMIN + 6) return number;
    return 0;
}

/// The shortest flight-recorder window `flight:` takes: a shorter one keeps next to nothing of
/// what led to a hang (whose own threshold is 250 ms by default).
#define TK_FLIGHT_MINIMUM_NS 100000000ull

#define TK_ACCEPTED "accepted: lockorder, lockorder:fatal, hangs, hangs:250ms (ns, us, ms, s), contention, trace, " \
                    "blocking, blocking:fatal, waits, dump, dump:SIGUSR2 (USR1, USR2, QUIT, WINCH, PWR or a real-time signal's number), flight, flight:30s (at least 100ms), metrics, " \
                    "all, off, none; " \
                    "any case, spaces allowed around items"

/// Appends to `warnings` (NUL-terminated, `*used` bytes so far, cut at `size`) the line naming a
/// rejected item: the item as written (control bytes as '?', at most 80 bytes) and why.
static void tk_warn(char *warnings, size_t size, size_t *used, const char *start, const char *end, const char *why) {
    if (warnings == NULL || size == 0 || *used + 1 >= size) return;
    char item[84];
    size_t n = 0;
    for (const char *p = start; p < end && n < 80; p++) item[n++] = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p;
    if (end - start > 80) { item[n++] = '.'; item[n++] = '.'; item[n++] = '.'; }
    item[n] = '\0';
    int written = snprintf(warnings + *used, size - *used,
                           "ThreadKit diagnostics: TK_DIAGNOSTICS: ignoring \"%s\" (%s); nothing of it is enabled (" TK_ACCEPTED ")\n",
                           item, why);
    if (written > 0) *used = *used + (size_t)written < size ? *used + (size_t)written : size - 1;
}

void tk_diagnostics_parse(const char *text, tk_diagnostics_settings *out, char *warnings, size_t size) {
    memset(out, 0, sizeof *out);
    size_t used = 0;
    if (warnings != NULL && size > 0) warnings[0] = '\0';
    if (text == NULL) return;
    const char *item = text;
    for (;;) {
        const char *comma = strchr(item, ',');
        const char *start = item, *end = comma ? comma : item + strlen(item);
        tk_trim(&start, &end);
        if (start < end) {
            const char *colon = memchr(start, ':', (size_t)(end - start));
            const char *name_end = colon ? colon : end, *option = colon ? colon + 1 : end, *option_end = end;
            tk_trim(&start, &name_end);
            tk_trim(&option, &option_end);
            const char *why = NULL;
            uint32_t bits = 0;
            if (tk_is(start, name_end, "lockorder")) {
                if (!colon) bits = TK_DIAG_LOCK_ORDER;
                else if (tk_is(option, option_end, "fatal")) bits = TK_DIAG_LOCK_ORDER | TK_DIAG_LOCK_ORDER_FATAL;
                else why = "lockorder takes no option but fatal";
            } else if (tk_is(start, name_end, "hangs")) {
                uint64_t threshold = colon ? tk_duration(option, option_end) : 0;
                if (colon && threshold == 0) why = "hangs takes a positive duration, such as 250ms, 2s or 500us";
                else {
                    bits = TK_DIAG_HANGS;
                    if (threshold != 0) out->hang_threshold_ns = threshold;
                }
            } else if (tk_is(start, name_end, "blocking")) {
                if (!colon) bits = TK_DIAG_BLOCKING;
                else if (tk_is(option, option_end, "fatal")) bits = TK_DIAG_BLOCKING | TK_DIAG_BLOCKING_FATAL;
                else why = "blocking takes no option but fatal";
            } else if (tk_is(start, name_end, "dump")) {
                int shutdown = 0;
                int number = colon ? tk_signal(option, option_end, &shutdown) : SIGUSR2;
                if (shutdown)
                    why = "dump takes no shutdown signal: taken for dumps, SIGTERM, SIGINT or SIGHUP would no longer stop the "
                          "process; use SIGUSR2, SIGUSR1, SIGQUIT, SIGWINCH, SIGPWR or a real-time signal by number";
                else if (number == 0)
                    why = "dump takes SIGUSR2, SIGUSR1, SIGQUIT, SIGWINCH, SIGPWR or a real-time signal by number (SIGRTMIN..SIGRTMAX "
                          "but SIGRTMIN+6, the hang watchdog's); never one that ends, stops or faults the process, nor one the "
                          "system uses (SIGCHLD, SIGPIPE, SIGALRM...)";
                else {
                    bits = TK_DIAG_DUMP | TK_DIAG_WAITS;
                    out->dump_signal = number;
                }
            } else if (tk_is(start, name_end, "flight")) {
                uint64_t window = colon ? tk_duration(option, option_end) : 30000000000ull;
                if (window == 0) why = "flight takes a positive duration, such as 30s or 500ms";
                else if (window < TK_FLIGHT_MINIMUM_NS) why = "flight takes a window of at least 100ms, such as 30s or 500ms";
                else {
                    bits = TK_DIAG_FLIGHT | TK_DIAG_TRACE | TK_DIAG_WAITS;
                    out->flight_window_ns = window;
                }
            } else if (tk_is(start, name_end, "waits") || tk_is(start, name_end, "metrics")) {
                if (colon) why = "this item takes no option";
                else bits = tk_is(start, name_end, "waits") ? TK_DIAG_WAITS : TK_DIAG_METRICS;
            } else if (tk_is(start, name_end, "contention") || tk_is(start, name_end, "trace") ||
                       tk_is(start, name_end, "all") || tk_is(start, name_end, "off") || tk_is(start, name_end, "none")) {
                if (colon) why = "this item takes no option";
                else if (tk_is(start, name_end, "contention")) bits = TK_DIAG_CONTENTION;
                else if (tk_is(start, name_end, "trace")) bits = TK_DIAG_TRACE;
                else if (tk_is(start, name_end, "all")) bits = TK_DIAG_LOCK_ORDER | TK_DIAG_HANGS | TK_DIAG_CONTENTION | TK_DIAG_TRACE;
                else out->off = 1;
            } else {
                why = "unknown name";
            }
            if (why != NULL) {
                out->rejected++;
                tk_warn(warnings, size, &used, start, end, why);
            }
            out->features |= bits;
        }
        if (comma == NULL) break;
        item = comma + 1;
    }
}

__attribute__((constructor)) static void tk_diagnostics_init(void) {
    const char *value = getenv("TK_DIAGNOSTICS");
    uint32_t word = 0;
#ifdef DEBUG
    // Debug builds check lock order unless TK_DIAGNOSTICS says otherwise (docs/Diagnostics.md).
    word = TK_DIAG_LOCK_ORDER;
#endif
    if (value != NULL) {
        tk_diagnostics_env = value;
        tk_diagnostics_settings settings;
        char warnings[2048];
        tk_diagnostics_parse(value, &settings, warnings, sizeof warnings);
        // Named features add to the debug default; `off` turns everything off.
        word = settings.off ? 0 : (word | settings.features);
        // Said once, here: the program may never touch the diagnostics API.
        size_t length = strlen(warnings), done = 0;
        while (done < length) {
            ssize_t n = write(STDERR_FILENO, warnings + done, length - done);
            if (n <= 0) break;
            done += (size_t)n;
        }
    }
    tk_diagnostics_word = word;
}
