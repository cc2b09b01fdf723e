// The trace rings' thread-local pointer, the thread-exit destructor that retires a ring, and the
// exporter's copy (include/CThreadKitTrace.h, docs/DiagnosticsTrace.md).
#define _GNU_SOURCE
#include "include/CThreadKitTrace.h"
#include <pthread.h>
#include <string.h>

__thread tk_trace_ring *tk_trace_current = NULL;
uint64_t tk_trace_session = 1;

__thread uint32_t tk_trace_flow_next = 0;
__thread uint32_t tk_trace_flow_left = 0;
__thread tk_trace_sampler tk_trace_item_sampler = {0, 0, 0};
/// Flow-id blocks handed out so far (relaxed: only uniqueness matters).
static uint32_t tk_trace_flow_blocks = 0;

uint32_t tk_trace_flow_refill(void) {
    uint32_t block = __atomic_fetch_add(&tk_trace_flow_blocks, 1, __ATOMIC_RELAXED);
    uint32_t first = block * TK_TRACE_FLOW_BLOCK;
    // Block 0 (and its wrapped repeats) starts at 0, which means "not traced": skip that id.
    if (first == 0) first = 1;
    uint32_t end = block * TK_TRACE_FLOW_BLOCK + TK_TRACE_FLOW_BLOCK; // wraps to 0 for the last block
    tk_trace_flow_next = first + 1;
    tk_trace_flow_left = end - first - 1;
    return first;
}

void tk_trace_sample_adapt(tk_trace_sampler *sampler) { tk_trace_sample_adapt_at(sampler, tk_trace_now()); }

void tk_trace_sample_adapt_at(tk_trace_sampler *sampler, uint64_t now) {
    uint32_t period = sampler->period;
    if (period == 0) {
        period = 1;
    } else {
        // The period that would have spaced these `period` items SPACING apart: grown at most
        // fourfold a step (a short burst does not throw the period up), shrunk at once (a thread
        // going quiet after a flood traces its next items again).
        uint64_t gap = now - sampler->last;
        if (gap == 0) gap = 1;
        uint64_t wanted = (uint64_t)period * TK_TRACE_SAMPLE_SPACING_NS / gap;
        if (wanted > (uint64_t)period * 4) wanted = (uint64_t)period * 4;
        if (wanted > TK_TRACE_SAMPLE_MAX_PERIOD) wanted = TK_TRACE_SAMPLE_MAX_PERIOD;
        if (wanted < 1) wanted = 1;
        period = (uint32_t)wanted;
    }
    sampler->period = period;
    sampler->countdown = period;
    sampler->last = now;
}

static pthread_key_t tk_trace_exit_key;
static pthread_once_t tk_trace_key_once = PTHREAD_ONCE_INIT;

/// At thread exit: the ring may be given to a later thread. Releasing: pairs with the registry's
/// acquiring load, so the new owner's writes come after this thread's last event.
static void tk_trace_thread_exit(void *value) {
    tk_trace_ring *ring = value;
    if (tk_trace_current == ring) tk_trace_current = NULL;
    __atomic_store_n(&ring->retired, 1, __ATOMIC_RELEASE);
}

static void tk_trace_make_key(void) { pthread_key_create(&tk_trace_exit_key, tk_trace_thread_exit); }

void tk_trace_install(tk_trace_ring *ring) {
    pthread_once(&tk_trace_key_once, tk_trace_make_key);
    tk_trace_current = ring;
    pthread_setspecific(tk_trace_exit_key, ring);
}

void tk_trace_reset(tk_trace_ring *ring, uint64_t session, uint32_t tid) {
    __atomic_store_n(&ring->head, 0, __ATOMIC_RELAXED);
    ring->session = session;
    ring->tid = tid;
    __atomic_store_n(&ring->retired, 0, __ATOMIC_RELAXED);
    memset(ring->cache_keys, 0, sizeof ring->cache_keys);
    memset(ring->cache_values, 0, sizeof ring->cache_values);
}

uint64_t tk_trace_copy(tk_trace_ring *ring, tk_trace_event *out) {
    uint64_t capacity = ring->mask + 1;
    // Acquiring: pairs with the owner's releasing store of head after it wrote the event.
    uint64_t before = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
    uint64_t first = before > capacity ? before - capacity : 0;
    for (uint64_t i = first; i < before; i++) {
        tk_trace_event *e = &ring->slots[i & ring->mask];
        tk_trace_event *o = &out[i - first];
        o->timestamp = __atomic_load_n(&e->timestamp, __ATOMIC_RELAXED);
        o->object = __atomic_load_n(&e->object, __ATOMIC_RELAXED);
        o->argument = __atomic_load_n(&e->argument, __ATOMIC_RELAXED);
        o->name = __atomic_load_n(&e->name, __ATOMIC_RELAXED);
        o->kind = __atomic_load_n(&e->kind, __ATOMIC_RELAXED);
        o->phase = __atomic_load_n(&e->phase, __ATOMIC_RELAXED);
        o->detail = __atomic_load_n(&e->detail, __ATOMIC_RELAXED);
    }
    // The sequence-lock check: the writer may be rewriting the slot of index `after` (old index
    // after - capacity) and has rewritten those below it, so only indexes from
    // after - capacity + 1 are intact. The acquiring fence pairs with the writer's releasing
    // fence: a copy that read a rewritten field makes the head stored before it visible here.
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint64_t after = __atomic_load_n(&ring->head, __ATOMIC_RELAXED);
    uint64_t safe = after >= capacity ? after - capacity + 1 : 0;
    if (safe <= first) return before - first;
    if (safe >= before) return 0;
    uint64_t dropped = safe - first;
    memmove(out, out + dropped, (size_t)(before - safe) * sizeof *out);
    return before - safe;
}

int tk_trace_thread_name(char *buffer, size_t size) {
    return pthread_getname_np(pthread_self(), buffer, size);
}
