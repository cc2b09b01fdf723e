// The diagnostics switch (include/CThreadKitDiagnostics.h): the word and the constructor that
// sets its feature bits from TK_DIAGNOSTICS before main runs. Only the feature names are parsed
// here; their arguments (hangs:250ms) are parsed by DiagnosticsConfiguration.swift.
#include "include/CThreadKitDiagnostics.h"
#include <stdlib.h>
#include <string.h>

uint32_t tk_diagnostics_word = 0;
static const char *tk_diagnostics_env = NULL;

const char *tk_diagnostics_environment(void) { return tk_diagnostics_env; }

/// One comma-separated item: its name (before any ':') decides the bit.
static uint32_t tk_diagnostics_item(const char *item, size_t length) {
    size_t name = 0;
    while (name < length && item[name] != ':') name++;
#define TK_IS(literal) (name == sizeof(literal) - 1 && strncmp(item, literal, name) == 0)
    if (TK_IS("lockorder")) {
        // lockorder:fatal stops the process at the first cycle.
        if (length > name + 1 && strncmp(item + name + 1, "fatal", length - name - 1) == 0)
            return TK_DIAG_LOCK_ORDER | TK_DIAG_LOCK_ORDER_FATAL;
        return TK_DIAG_LOCK_ORDER;
    }
    if (TK_IS("hangs")) return TK_DIAG_HANGS;
    if (TK_IS("contention")) return TK_DIAG_CONTENTION;
    if (TK_IS("trace")) return TK_DIAG_TRACE;
    if (TK_IS("all")) return TK_DIAG_LOCK_ORDER | TK_DIAG_HANGS | TK_DIAG_CONTENTION | TK_DIAG_TRACE;
    if (TK_IS("off") || TK_IS("none")) return 0x80000000u; // marker: everything off, debug default too
#undef TK_IS
    return 0; // unknown names are reported by the Swift side, which sees the whole string
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
        uint32_t parsed = 0;
        const char *item = value;
        while (*item != '\0') {
            const char *end = strchr(item, ',');
            size_t length = end ? (size_t)(end - item) : strlen(item);
            parsed |= tk_diagnostics_item(item, length);
            if (end == NULL) break;
            item = end + 1;
        }
        // Named features add to the debug default; `off` turns everything off.
        word = (parsed & 0x80000000u) ? 0 : (word | parsed);
    }
    tk_diagnostics_word = word;
}
