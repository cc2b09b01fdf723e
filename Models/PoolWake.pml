/*
 * PoolWake.pml — the dispatch pool's submit / stage / park / wake protocol, one tier.
 * Checked by Models/check.sh with spin (exhaustive safety search); see Models/README.md.
 *
 * WHAT IS MODELLED
 *   NP producer threads (outside the pool) each submit J jobs; W worker threads serve them.
 *   Producers never take the pool's lock on their path except by tryLock: they stage the job in
 *   their shard, raise `pending`, and either skip the lock (a searcher exists or every worker is
 *   busy: "step 4"), or tryLock once and drain/offer themselves. Every holder of the pool's lock
 *   drains on lock and re-checks `pending` after unlock. Workers pop, chain the next searcher,
 *   park on their event when there is nothing to do, and are woken (or started) by offers.
 *
 * HOW IT MAPS TO THE SWIFT CODE (Sources/ThreadKit/Dispatch/Pool/)
 *   Producer, step 1         InjectionStage.stage: shard lock, append, set hasJobs, shard unlock
 *   Producer, steps 2-3      InjectionStage.stage: `pending` load, `pending` store (SC)
 *   Producer, step 2a        DispatchPool.submitShared: `pending` was up, but neither a searcher
 *                            nor a running worker (mirrors): tryLock as in step 5 anyway
 *   Producer, step 4         DispatchPool.submitShared: skip the lock when searchingMirror(t) != 0
 *                            or runningMirror(t) >= width (mirrors read without the lock)
 *   Producer, step 5         DispatchPool.submitShared: `stage(...) && tryLockPool()` then unlockPool
 *   lockL / tryLockL         DispatchLock.lock / DispatchLock.tryLock (SC, success or failure)
 *   lockTimeDrain            DispatchPool.lockPool / tryLockPool: `if pending { drainStageLocked }`
 *                            -> InjectionStage.drain: pending.exchange(false), then per shard:
 *                            hasJobs load, shard lock, move rings to the run queue, clear hasJobs
 *   releaseOfferingDrained   DispatchPool.releaseOfferingDrained: offer the drained tier (own
 *                            Actions), DispatchLock.unlockSequentiallyConsistent, perform
 *   unlockPool               DispatchPool.unlockPool: releaseOfferingDrained, then
 *                            drainStageAfterUnlock: while `pending` (SC load) is up and the
 *                            mirrors show no searcher and fewer than `W` running (tiersOwedADrain:
 *                            the producer's step-4 rule), tryLockPool, drain, release
 *   offer                    DispatchPool.offerWorkLocked (+ Actions.wake / Actions.start)
 *   perform                  DispatchPool.Actions.perform: the chosen worker's event.set(), or
 *                            startWorkers (a worker process not started yet gets its event set)
 *   Worker                   PoolWorker.run + DispatchPool.nextJob + PoolWorker.sleepIdle
 *   searchingMirror etc.     DispatchPool.addSearching and the running-count changes, each
 *                            with the store of its mirror (searchingNormal, runningMirror)
 *
 * MEMORY MODEL
 *   Promela's interleaving semantics is sequential consistency. That is exact for the accesses
 *   the protocol's correctness hangs on, because the Swift code makes exactly those sequentially
 *   consistent: `pending` (load, store, exchange), the shards' `hasJobs` (store, load), the pool
 *   lock's tryLock (SC on success and failure) and unlockSequentiallyConsistent, and the
 *   searching/running mirrors (stored SC under the lock whenever the counters change, loaded SC
 *   by producers). Two store-buffering (Dekker) pairs rely on it:
 *     producer: store pending ; tryLock L        vs  holder:  release L ; load pending
 *     producer: store pending ; load mirrors     vs  worker:  store mirrors (under L) ; release L ;
 *                                                             load pending
 *   In each pair at least one side sees the other's store, so a raised `pending` is always
 *   followed by some thread taking L and draining. NOTE: the model assumes the searching/running
 *   mirrors are stored and loaded SC (the brief of the version being implemented); relaxed
 *   mirrors would break the second pair. The lock-time `pending` load in lockPool/tryLockPool
 *   is relaxed in Swift: the model lets lockPool's read be stale (skip the drain although
 *   `pending` is up); see lockTimeDrain for tryLockPool's.
 *
 * STEP GRANULARITY (reductions that only merge steps that commute with every other thread's)
 *   - L-guarded state (run queue, idle stack, counters, drained flag, the plans) is touched only
 *     by the holder of L, so L-guarded updates are folded into the neighbouring visible step.
 *   - The two mirror stores of one section form one step: only the holder of L writes them, and
 *     any other thread's access between them commutes with one of the two.
 *   - lockPool's `pending` load and drain's exchange form one step (only a holder of L lowers
 *     `pending`, so the exchange returns what the load saw), and so do a shard's hasJobs load
 *     and its locked move (a producer's append between them rewrites hasJobs = true, which the
 *     load had read already).
 *
 * ABSTRACTIONS
 *   - Jobs are counted, not identified: a shard, the run queue are counters; `ran` counts jobs run.
 *     FIFO order, QoS levels, aging, batches, local queues and stealing are left out.
 *   - A shard's locked sections (the producer's append+set, the drainer's move+clear) are atomic
 *     steps: the only unlocked access to shard state is the drainer's hasJobs load, which sees
 *     the same value whether or not the producer is mid-section (hasJobs is set last).
 *   - Workers: a fixed set of W processes. Thread start (`startWorkers`) is modelled as setting
 *     the event of the next not-yet-started process (threads < cap, cap = W processes); it then
 *     counts as a searcher, like a woken one. No idle timeout or retirement, no blocking
 *     (willPark/didUnpark), no monitor thread, no failed thread starts.
 *   - ParkingEvent: a boolean per worker, reset under L when the worker pushes itself on the
 *     idle stack, set by the waker after its unlock; the wait returns once it is set (spin and
 *     futex details are the event's own business).
 *
 * PROPERTIES (assertions; check.sh runs pan exhaustively with -DSAFETY, and with -DNP below)
 *   P1 no lost wake-up / stuck job: in every state where nothing can move (Promela `timeout`):
 *      every submitted job ran, nothing is staged, `pending` is down, the run queue is empty,
 *      and every started worker is parked idle with no searcher left (process Quiescence).
 *   P2 counter invariants, at every release of L: searching >= 0, running >= 0,
 *      searching <= running, running + idle == threads <= W.
 *   P3 at most one wake planned per section (DispatchPool.Actions.wake's assertion).
 *   Deadlock freedom: the only legal resting places are the `end` labels (a worker waiting on its
 *   event, or not started yet); finished producers; Quiescence after its check.
 *   Step 4's skip is covered: producers really skip the lock on the mirrors, and so do holders
 *   after unlocking (the same rule, its mirror loads after the load that saw `pending` up), so
 *   P1 fails if the Dekker pairing above did not hold.
 *   P4 termination: compiled with -DNP and no progress labels, `pan -l` reports any cycle in the
 *   state graph; none exists, so every execution is finite and ends where P1 is checked: every
 *   job runs under every schedule, no fairness assumed.
 * The model is not vacuous: removing the after-unlock `pending` check, the idle path's mirror
 * stores, or moving step 4 before the raise of `pending`, or resetting the event after the
 * unlock each makes pan report a P1 violation.
 *
 * Sizes: -DW=2 -DNP=2 -DJ=2 by default; check.sh also runs -DW=3 -DJ=1 (-DNP=3 -DJ=1: 17 M
 * states, about a minute, by hand).
 */

#ifndef W
#define W 2             /* width = worker processes (thread cap) */
#endif
#ifndef NP
#define NP 2            /* producers, one shard each */
#endif
#ifndef J
#define J 2             /* jobs per producer */
#endif
#define TOTAL (NP * J)
#define NONE 255

/* --- shared state --------------------------------------------------------------------------- */
byte shardJobs[NP];     /* a shard's staged jobs (guarded by the shard's lock) */
bool hasJobs[NP];       /* Shard.hasJobs (SC) */
bool pending;           /* InjectionStage.pending (SC) */
bool L;                 /* the pool's DispatchLock: true = held */
/* guarded by L */
byte RQ;                /* the run queue (jobs of the tier) */
byte idleStack[W];      /* Tier.idle, most recently idle last */
byte nIdle;
short running;         /* Tier.running */
short searching;       /* Tier.searching */
short threads;         /* Tier.threads */
bool drained;           /* InjectionStage.drainedTiers (one tier) */
/* read without L */
short searchingMirror;  /* searchingNormal (SC store under L, SC load) */
short runningMirror;    /* the running count's mirror (SC store under L, SC load) */
bool ev[W];             /* PoolWorker.event */
/* observation only */
byte ran;               /* jobs run */

/* --- the pool's lock ---------------------------------------------------------------------- */
inline lockL() { atomic { !L -> L = true } }
inline tryLockL(ok) {
    atomic { if :: !L -> L = true; ok = true :: else -> ok = false fi }
}

inline checkInvariants() {
    assert(searching >= 0 && running >= 0 && searching <= running);
    assert(running + nIdle == threads && threads <= W)
}

/* InjectionStage.drain, after lockPool's `if pending` load. Caller holds L. */
inline lockTimeDrain(mayBeStale) {
    /* lockPool's / tryLockPool's `pending` load (relaxed in Swift) and drain's exchange, in one
       step: only a holder of L lowers `pending`, so the exchange returns what the load saw.
       After lockPool (mayBeStale) the relaxed load may read a stale `false`: the model lets it
       skip the drain whatever it reads. After tryLockPool the thread has just seen `pending`
       raised (its own store, or the SC load of the after-unlock loop), and by coherence its
       relaxed load reads that or a newer value: modelled exact. */
    atomic {
        if
        :: pending -> pending = false; got = true
        :: !pending || mayBeStale -> got = false    /* nothing raised, or a stale read */
        fi
    };
    if
    :: got ->
        i = 0;
        do
        :: i < NP ->
            atomic {                                /* hasJobs load (SC); shard lock, move, clear */
                if
                :: hasJobs[i] ->
                    if :: shardJobs[i] > 0 -> drained = true :: else fi;
                    RQ = RQ + shardJobs[i]; shardJobs[i] = 0; hasJobs[i] = false
                :: else
                fi;
                i++
            }
        :: else -> break
        od;
        atomic { got = false; i = 0 }
    :: else
    fi
}

/* DispatchPool.offerWorkLocked into the plan `slot` (Actions). Caller holds L. The L-guarded
   decision and counter changes are folded into the first visible step, the store of
   searchingMirror; the store of runningMirror is a step of its own. */
inline offer(slot) {
    atomic {
        if
        :: searching == 0 && running < W && RQ > 0 ->
            assert(slot == NONE);                   /* P3: Actions.wake's assertion */
            if
            :: nIdle > 0 ->                         /* wake the most recently idle */
                nIdle--; slot = idleStack[nIdle]; idleStack[nIdle] = 0
            :: else ->                              /* start one (threads < cap) */
                assert(threads < W);
                slot = threads; threads++
            fi;
            running++; searching++;
            searchingMirror = searching;            /* SC stores, under L */
            runningMirror = running
        :: else
        fi
    }
}

/* Actions.perform: after the unlock. */
inline perform(slot) {
    if
    :: slot != NONE -> ev[slot] = true; slot = NONE
    :: else
    fi
}

/* DispatchPool.releaseOfferingDrained: offer what the drain brought, release L (SC), perform. */
inline releaseOfferingDrained() {
    if
    :: drained -> drained = false; offer(dplan)
    :: else
    fi;
    atomic {
        checkInvariants();
        L = false                                   /* unlockSequentiallyConsistent */
    };
    perform(dplan)
}

/* DispatchPool.unlockPool (releaseOfferingDrained, then drainStageAfterUnlock): while `pending`
   is up and no searcher (first mirror load) or `W` running workers (second) will drain it
   (tiersOwedADrain), and the lock is free: take it, drain, release. */
inline unlockPool() {
    releaseOfferingDrained();
    do
    :: pending ->                                   /* SC load after the SC release */
        if
        :: searchingMirror != 0 -> break            /* a searcher will drain */
        :: else
        fi;
        if
        :: runningMirror >= W -> break              /* a busy worker will drain */
        :: else
        fi;
        tryLockL(ok);
        if
        :: ok -> lockTimeDrain(false); releaseOfferingDrained()
        :: else -> break
        fi
    :: else -> break
    od;
    ok = false
}

/* --- producers: InjectionStage.stage + DispatchPool.submitShared's staging path --------------- */
proctype Producer(byte me) {
    byte k = 0;
    bool ok, got;
    byte i;
    byte dplan = NONE;

    do
    :: k < J ->
        atomic { shardJobs[me]++; hasJobs[me] = true };    /* 1. shard lock, append, hasJobs */
        if
        :: pending ->                                       /* 2. the raised flag's drain finds it, */
            if                                              /*    unless no worker runs or searches: */
            :: searchingMirror == 0 && runningMirror == 0 -> goto try   /* then wake one (2a) */
            :: else -> goto staged
            fi
        :: else
        fi;
        pending = true;                                     /* 3. raise (SC) */
        if
        :: searchingMirror != 0 -> goto staged                /* 4. a searcher will drain */
        :: else
        fi;
        if
        :: runningMirror >= W -> goto staged                  /* 4. a busy worker will drain */
        :: else
        fi;
try:    tryLockL(ok);                                       /* 5. */
        if
        :: ok -> lockTimeDrain(false); unlockPool()
        :: else                                             /* the holder sees pending */
        fi;
staged: k++
    :: else -> break
    od
}

/* --- workers: PoolWorker.run, DispatchPool.nextJob, PoolWorker.sleepIdle ---------------------- */
proctype Worker(byte me) {
    bool searchingSelf;         /* nextJob's `wasSearching` */
    bool ok, got;
    byte i;
    byte plan = NONE;           /* the section's Actions */
    byte dplan = NONE;          /* releaseOfferingDrained's Actions */

end_wait:
    ev[me];                     /* parked (or not started): wait on own event */
    searchingSelf = true;       /* woken or started: counted searching by the waker */
    do
    :: lockL(); lockTimeDrain(true);
        if
        :: RQ > 0 ->
            atomic { RQ--; ran++ };                         /* pop; `ran` counts it run */
            if
            :: searchingSelf ->
                atomic { searchingSelf = false; searching--; searchingMirror = searching };
                offer(plan)                                 /* the chain: next searcher */
            :: else
            fi;
            unlockPool();
            perform(plan)                                   /* then run the job */
        :: else ->                                          /* go idle */
            atomic {
                if :: searchingSelf -> searchingSelf = false; searching-- :: else fi;
                running--;
                idleStack[nIdle] = me; nIdle++;
                ev[me] = false;                             /* event.reset() under L */
                searchingMirror = searching;
                runningMirror = running
            };
            unlockPool();
            perform(plan);
            goto end_wait
        fi
    od
}

/* --- P1: when nothing can move, everything ran and every worker is parked idle -------------- */
active proctype Quiescence() {
    byte j;
    timeout ->
    assert(ran == TOTAL);                                   /* no stuck job */
    do
    :: j < NP -> assert(shardJobs[j] == 0 && !hasJobs[j]); j++
    :: else -> break
    od;
    assert(!pending && RQ == 0 && !L);
    assert(searching == 0 && running == 0 && nIdle == threads)  /* no lost searcher */
}

init {
    byte n;
    atomic {
        n = 0;
        do :: n < W -> run Worker(n); n++ :: else -> break od;
        n = 0;
        do :: n < NP -> run Producer(n); n++ :: else -> break od
    }
}
