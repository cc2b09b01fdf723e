// CThreadKitTrace: the recording half of the trace recorder (docs/DiagnosticsTrace.md). Each
// thread writes fixed-size events into its own ring; the ring is found through a C thread-local
// pointer (Swift cannot declare one, and pthread_getspecific is a call), and every field is
// written with a relaxed atomic store so that an exporter copying a ring while its thread records
// reads torn-free words (it then discards the slots the writer may have overwritten, as a
// sequence lock does). Registration, names and export are Swift (Diagnostics/TraceRecorder*.swift).
#ifndef CTHREADKIT_TRACE_H
#define CTHREADKIT_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/// One recorded event: 32 bytes, no pointers to anything the recorder must keep alive.
typedef struct {
    uint64_t timestamp;   // ns on CLOCK_MONOTONIC
    uint64_t object;      // what the event is about: an object id, an item's flow id, a message id
    uint64_t argument;    // kind-specific (a lock's wait result, a message's size, a state)
    uint32_t name;        // index in the interned-name table (0: none)
    uint16_t kind;        // TraceEventKind
    uint8_t phase;        // TracePhase: begin, end, instant, flow start, flow end
    uint8_t detail;       // kind-specific small value (a QoS, a run-loop activity)
} tk_trace_event;

/// One thread's ring. `slots`, `mask`, `tid` and `owner` change only under the registry lock
/// (TraceRecorder), while the owning thread re-registers it for a new session or a new thread
/// takes over a retired ring. `head` (events written since the ring was reset) is stored only by
/// the owning thread, releasing, after the event's fields; the exporter loads it acquiring.
/// `session` is written under the registry lock, read by the owning thread without it (it is
/// that thread that writes it). `retired` is set by the thread-exit destructor (releasing) and
/// read under the registry lock (acquiring) to recycle the ring.
typedef struct tk_trace_ring {
    tk_trace_event *slots;
    uint64_t mask;        // capacity - 1 (capacity a power of two)
    uint64_t head;
    uint64_t session;
    uint32_t tid;
    uint32_t retired;
    void *owner;          // the Swift TraceRing object (unretained; the registry retains it)
    // Per-thread name cache, owning thread only: a String's two words -> interned index.
    uint64_t cache_keys[128];
    uint32_t cache_values[64];
} tk_trace_ring;

/// The calling thread's ring, NULL before its first event.
extern __thread tk_trace_ring *tk_trace_current;
/// The current recording session (bumped by TKTrace.start). Relaxed: a thread that sees the new
/// value late records one event into its old ring, which the exporter no longer reads.
extern uint64_t tk_trace_session;

static inline uint64_t tk_trace_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline tk_trace_ring *tk_trace_ring_of_current_thread(void) { return tk_trace_current; }
static inline uint64_t tk_trace_session_now(void) { return __atomic_load_n(&tk_trace_session, __ATOMIC_RELAXED); }
static inline void tk_trace_session_store(uint64_t session) { __atomic_store_n(&tk_trace_session, session, __ATOMIC_RELAXED); }
/// Events written since the ring's reset (acquiring: pairs with the owner's releasing store).
static inline uint64_t tk_trace_head(tk_trace_ring *ring) { return __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE); }
/// The name cache, as pointers: a Swift `&ring.pointee.cache_keys` would be an access to the
/// whole ring, which ThreadSanitizer reports against the exporter's reads of other fields.
static inline uint64_t *tk_trace_cache_keys(tk_trace_ring *ring) { return ring->cache_keys; }
static inline uint32_t *tk_trace_cache_values(tk_trace_ring *ring) { return ring->cache_values; }
/// Whether the ring's thread has exited (acquiring: pairs with the exit destructor's store).
static inline uint32_t tk_trace_is_retired(tk_trace_ring *ring) { return __atomic_load_n(&ring->retired, __ATOMIC_ACQUIRE); }

/// Records one event into the calling thread's ring. Returns 0 (recording nothing) when the
/// thread has no ring for the current session yet: the Swift caller registers one and retries.
static inline int tk_trace_record(uint16_t kind, uint8_t phase, uint8_t detail, uint32_t name,
                                  uint64_t object, uint64_t argument) {
    tk_trace_ring *ring = tk_trace_current;
    if (ring == NULL || ring->session != __atomic_load_n(&tk_trace_session, __ATOMIC_RELAXED)) return 0;
    uint64_t head = __atomic_load_n(&ring->head, __ATOMIC_RELAXED); // only this thread stores it
    tk_trace_event *e = &ring->slots[head & ring->mask];
    // Releasing fence (free on x86): pairs with the exporter's acquiring fence in tk_trace_copy.
    // An exporter that reads any field stored below also sees the head stored before the fence,
    // so it knows this slot is being rewritten (the sequence-lock protocol).
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&e->timestamp, tk_trace_now(), __ATOMIC_RELAXED);
    __atomic_store_n(&e->object, object, __ATOMIC_RELAXED);
    __atomic_store_n(&e->argument, argument, __ATOMIC_RELAXED);
    __atomic_store_n(&e->name, name, __ATOMIC_RELAXED);
    __atomic_store_n(&e->kind, kind, __ATOMIC_RELAXED);
    __atomic_store_n(&e->phase, phase, __ATOMIC_RELAXED);
    __atomic_store_n(&e->detail, detail, __ATOMIC_RELAXED);
    // Releasing: pairs with the exporter's acquiring load; it reads the fields stored above.
    __atomic_store_n(&ring->head, head + 1, __ATOMIC_RELEASE);
    return 1;
}

/// Dispatch items' flow ids (docs/DiagnosticsTrace.md §4), handed out per thread from blocks of
/// `TK_TRACE_FLOW_BLOCK` taken from one process-wide counter: one shared atomic per block, not per
/// item, so producers on many cores do not all write one cache line. Unique until the 32-bit
/// space wraps (as before); never 0 (0 means "not traced"). Owning thread only.
#define TK_TRACE_FLOW_BLOCK 256u
extern __thread uint32_t tk_trace_flow_next;
extern __thread uint32_t tk_trace_flow_left;
uint32_t tk_trace_flow_refill(void);
static inline uint32_t tk_trace_next_flow(void) {
    if (tk_trace_flow_left == 0) return tk_trace_flow_refill();
    tk_trace_flow_left -= 1;
    return tk_trace_flow_next++;
}

/// The flight recorder's sampling of dispatch items (docs/DiagnosticsTrace.md §8): in flight mode
/// a thread traces one item in `period` of those it submits, `period` adapted (1 to
/// TK_TRACE_SAMPLE_MAX_PERIOD) at each sampled item so that the items it traces are about
/// TK_TRACE_SAMPLE_SPACING_NS apart: a thread submitting sparsely traces every item, one flooding
/// the pool traces about one per 16 µs, and the recorder's cost per item stays a countdown. The
/// decision is the submitter's; an item not sampled carries flow 0 and no event anywhere, so a
/// traced item always has its enqueue, begin and end. Owning thread only.
#define TK_TRACE_SAMPLE_SPACING_NS 16000u
#define TK_TRACE_SAMPLE_MAX_PERIOD 1024u
typedef struct {
    uint32_t countdown;   // items to let pass before the next sampled one, plus one (0: sample now)
    uint32_t period;      // the current period (0 before the thread's first item)
    uint64_t last;        // tk_trace_now() at the last sampled item
} tk_trace_sampler;
extern __thread tk_trace_sampler tk_trace_item_sampler;
/// Adapts the period to the time since the last sampled item and starts the next countdown.
void tk_trace_sample_adapt(tk_trace_sampler *sampler);
/// The same decision with the clock passed in (`now`, ns): what the tests drive.
void tk_trace_sample_adapt_at(tk_trace_sampler *sampler, uint64_t now);
/// Whether the calling thread traces the item it is submitting (flight mode): 1 every `period`.
static inline int tk_trace_sample_item(void) {
    tk_trace_sampler *sampler = &tk_trace_item_sampler;
    if (sampler->countdown > 1) {
        sampler->countdown -= 1;
        return 0;
    }
    tk_trace_sample_adapt(sampler);
    return 1;
}
/// The calling thread's current sampling period (tests).
static inline uint32_t tk_trace_sample_period(void) { return tk_trace_item_sampler.period; }
/// Forgets the calling thread's sampling history: its next item is sampled, period 1 (tests).
static inline void tk_trace_sample_reset(void) {
    tk_trace_item_sampler.countdown = 0;
    tk_trace_item_sampler.period = 0;
    tk_trace_item_sampler.last = 0;
}

/// Makes `ring` the calling thread's ring and arranges for `tk_trace_ring_retire` at its exit.
void tk_trace_install(tk_trace_ring *ring);

/// Copies the ring's surviving events (at most its capacity, oldest first) into `out`, which has
/// room for the capacity; returns how many. Safe while the owning thread records: slots it may
/// have overwritten during the copy are dropped. Caller holds the registry lock.
uint64_t tk_trace_copy(tk_trace_ring *ring, tk_trace_event *out);

/// Resets the ring for `session` (head 0). Caller holds the registry lock; the owning thread
/// calls it, or any thread for a retired ring.
void tk_trace_reset(tk_trace_ring *ring, uint64_t session, uint32_t tid);

/// The calling thread's OS name (pthread_getname_np, which needs _GNU_SOURCE: not visible to Swift).
int tk_trace_thread_name(char *buffer, size_t size);

#endif
