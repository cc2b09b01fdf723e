/* StagedLevels.pml: the stage's level hint (InjectionStage.stagedLevels, docs/DispatchPool.md,
 * "Refill: batches sized by the backlog"). A busy worker running a long batch of one level hands it back when it
 * sees another level waiting: in the run queues (their mirror) or staged by a producer and not
 * drained yet (the hint). A producer stages its job into its shard, then sets its level's bit
 * (a load first; the read-modify-write only when the bit is clear). A drainer clears the bits of
 * the levels it drains, then looks at the shards and moves what it finds into the run queues.
 *
 * The property (a monitor): once a producer has finished staging, its job is never in a shard
 * with its bit clear while no drainer is between its clear and its look. So a worker that checks
 * the hint and the mirror between two batch jobs misses a staged job only while a drain is moving
 * it (which then publishes it in the mirror), never until its next visit to the pool's lock.
 *
 * -DCLEAR_AFTER_LOOK (the drainer looks first, then clears) must be caught: a job staged after
 * the look keeps its bit only until the clear, and waits for the whole batch.
 */
#ifndef NP
#define NP 2 /* at most 3 */
#endif
#ifndef ND
#define ND 2
#endif

bit hint = 0;          /* stagedLevels' bit for the level */
bit inShard[3];       /* producer i's job is staged, not drained */
bit done[3];          /* producer i finished staging (the job, then the hint) */
byte queued = 0;       /* jobs in the run queues (the mirror shows them) */
byte midDrain = 0;     /* drainers between their clear and their look */

proctype Producer(byte i) {
    bit seen;
    inShard[i] = 1;              /* under the shard's lock */
    seen = hint;                 /* the load */
    if
    :: seen == 0 -> hint = 1     /* the read-modify-write (an or: it cannot undo a clear) */
    :: else -> skip
    fi;
    done[i] = 1
}

/* The look: every staged job moves to the run queues (under the shards' locks). */
inline look() {
    byte j;
    for (j : 0 .. NP - 1) { if :: inShard[j] -> inShard[j] = 0; queued++ :: else -> skip fi }
}

proctype Drainer() {
#ifdef CLEAR_AFTER_LOOK
    atomic { look(); midDrain++; }
    atomic { hint = 0; midDrain--; }
#else
    atomic { hint = 0; midDrain++; }
    atomic { look(); midDrain--; }
#endif
}

/* A finished producer's job still in a shard, no drain in flight: its bit must be set. */
active proctype Monitor() {
end:
    do
    :: atomic { (midDrain == 0 && hint == 0 && (done[0] && inShard[0] || done[1] && inShard[1] || done[2] && inShard[2])) -> assert(false) }
    od
}

init {
    byte i;
    atomic {
        for (i : 0 .. NP - 1) { run Producer(i); }
        for (i : 1 .. ND) { run Drainer(); }
    }
}
