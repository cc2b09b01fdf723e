/*
 * PoolIdleWord.pml — a producer wakes an idle worker without the pool's lock: the idle word
 * (issue 48 item 3; docs/journal/2026-11-29-idle-word.md). One tier.
 * Checked by Models/check.sh with spin (exhaustive safety search); see Models/README.md.
 *
 * STATUS: built. The pool does this (IdleWord.swift, PoolScheduler.swift, DispatchPool.swift);
 * the names in the second column below are the code's. PoolWake.pml models the protocol before
 * it, when producers woke through the pool's lock.
 *
 * WHAT IS MODELLED
 *   The protocol of PoolWake.pml with one change. There, the tier's `searching` and `running`
 *   counters live under the pool's lock L and are copied to SC mirrors at each release, and a
 *   producer that must wake a worker takes L (tryLock), drains the stage itself and pops a worker
 *   off the idle stack. Here the three counters a wake decides on — searching, running, idle —
 *   are one atomic word, changed by read-modify-writes at the transition itself (not copied at
 *   the release), and the idle stack has its own small lock IL (a leaf: nothing else is taken
 *   while it is held; L may be held around it). A producer that raised `pending` and finds no
 *   searcher, fewer than W running and an idle worker:
 *     takes IL, checks the word again, claims the wake in one RMW (searching+1, running+1,
 *     idle-1), pops the worker, releases IL, sets the worker's event.
 *   It does not drain: the woken worker does, at its first visit to L. A producer that finds L
 *   held (a relaxed look: any answer is safe), or IL busy (IdleWord.tryClaim; IL's sections are
 *   single steps here, so only the first case is modelled), tries L instead, as in PoolWake.pml:
 *   the holder sees the flag when it unlocks. The producer takes L only then, when no worker is idle and a thread
 *   must be started (rare: while the tier grows), or when its
 *   claim failed and the word, read again, still says nobody comes (in the code: the idle worker
 *   retired meanwhile; here unreachable, since nothing retires). Holders of L offer the same way
 *   (IL inside L); a claim that finds nobody idle lets the holder plan a start without looking at
 *   the word again: pushes happen only under L, so while L is held nobody can become idle and be
 *   claimed before the start is counted. A worker going idle resets its event, then
 *   under IL pushes itself and moves itself from running (and searching) to idle in one RMW,
 *   releases L, and loads `pending` (SC) after that: the after-unlock check of PoolWake.pml.
 *
 * HOW IT MAPS TO THE DESIGN (docs/journal/2026-11-29-idle-word.md)
 *   word (searching, running, nIdle)   IdleWord: one Atomic<UInt64> per tier, SC RMWs and loads
 *   IL + idleStack                     the tier's idle stack under its own DispatchLock
 *   claim                              IdleWord.claim: under IL, recheck, one RMW; `noIdle` is its
 *                                      `.noneIdle` answer
 *   Producer, steps 4-5                DispatchPool.submitShared: SC load of the word, the step
 *                                      (PoolScheduler.submitterStep), then the claim, or tryLock
 *   offer                              DispatchPool.offerWorkLocked -> PoolScheduler.offer ->
 *                                      wakeOrStart (IL inside L)
 *   the push                           PoolScheduler.park -> IdleWord.park (event reset before it,
 *                                      in DispatchPool.nextJob)
 *   the chain                          PoolScheduler.started: IdleWord.add(searching: -1), offer
 *   Worker                             PoolWorker.run + DispatchPool.nextJob + PoolWorker.sleepIdle
 *
 * MEMORY MODEL
 *   Interleaving = sequential consistency; the design makes exactly these SC: `pending`, the
 *   shards' `hasJobs`, L's tryLock and unlock, the word's RMWs and loads. The Dekker pairs:
 *     producer: raise pending ; load word          vs  worker: RMW word (going idle, or a
 *                                                              searcher finding a job) ; ... ;
 *                                                              release L ; load pending
 *     producer: raise pending ; tryLock L          vs  holder: release L ; load pending
 *   A woken worker's drain follows the producer's raise through the event (set after the raise,
 *   waited on before the drain); the model still lets lockPool's relaxed `pending` load be stale.
 *
 * STEP GRANULARITY, ABSTRACTIONS: as PoolWake.pml (jobs counted, no QoS, batches, local queues,
 *   stealing, retirement, blocking or monitor; a thread start is the event of the next process
 *   not yet started). IL's sections are single atomic steps: only IL holders touch the stack,
 *   and the word's RMW inside is the one access other threads can see.
 *
 * PROPERTIES
 *   P1 no lost wake-up / stuck job: when nothing can move, every job ran, nothing is staged,
 *      `pending` is down, the run queue is empty, and every started worker is parked idle with
 *      no searcher counted (Quiescence).
 *   P2 the counters: at every IL release, the stack holds exactly `nIdle` workers; at every L
 *      release, 0 <= searching <= running and running + nIdle == threads <= W.
 *   P3 at most one worker planned per section; a claim always finds a worker on the stack.
 *   P4 (-DNP, pan -l) no cycle: every execution ends where P1 is checked.
 * Known-bad variants check.sh must catch:
 *   -DRESET_AFTER_PUSH     the idle worker resets its event after pushing itself (under L, as
 *                          before): a lock-free waker's set can land before the reset -> P1.
 *   -DPENDING_BEFORE_WORD  the idle worker loads `pending` before its word RMW (the Dekker
 *                          order reversed) and skips the after-unlock check when it saw it down.
 *   -DNO_RECHECK           the producer claims on its first (unlocked) look, without checking
 *                          again under IL: two producers claim the same last idle worker -> P3.
 */

#ifndef W
#define W 2
#endif
#ifndef NP
#define NP 2
#endif
#ifndef J
#define J 2
#endif
#define TOTAL (NP * J)
#define NONE 255

byte shardJobs[NP];
bool hasJobs[NP];
bool pending;
bool L;
bool IL;                /* the idle stack's lock */
/* guarded by L */
byte RQ;
short threads;
bool drained;
/* guarded by IL */
byte idleStack[W];
byte stackSize;
/* the idle word: one atomic (each access below is one atomic step) */
short searching;
short running;
short nIdle;
bool ev[W];
byte ran;

inline lockL() { atomic { !L -> L = true } }
inline tryLockL(ok) {
    atomic { if :: !L -> L = true; ok = true :: else -> ok = false fi }
}

inline checkInvariants() {
    assert(searching >= 0 && running >= 0 && searching <= running);
    assert(running + nIdle == threads && threads <= W)
}

inline lockTimeDrain(mayBeStale) {
    atomic {
        if
        :: pending -> pending = false; got = true
        :: !pending || mayBeStale -> got = false
        fi
    };
    if
    :: got ->
        i = 0;
        do
        :: i < NP ->
            atomic {
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

/* IdleWord.claim: take IL; if the word still says "no searcher, fewer than W running, one
   idle", claim in one RMW and pop the top of the stack; release IL. `slot` gets the worker or
   stays NONE; `noIdle` says "no searcher, fewer than W running, nobody idle" (`.noneIdle`). One
   atomic step (IL's section). */
inline claimWake(slot, noIdle) {
    atomic {
        !IL ->
        noIdle = false;
        if
        :: searching == 0 && running < W && nIdle > 0 ->
            assert(slot == NONE);                   /* P3 */
            searching++; running++; nIdle--;        /* the claim: one RMW */
            assert(stackSize > 0);                  /* P3: the claim finds a worker */
            stackSize--; slot = idleStack[stackSize]; idleStack[stackSize] = 0
        :: searching == 0 && running < W && nIdle == 0 -> noIdle = true
        :: else
        fi;
        assert(stackSize == nIdle)                  /* P2, at IL's release */
    }
}

/* PoolScheduler.offer under L: wake (claimWake) or, on its `.noneIdle`, start (threads < W,
   under L, without looking at the word again: PoolScheduler.wakeOrStart). The start asserts what
   the code relies on: nobody claimed or went idle between the claim's look and the start. */
inline offer(slot) {
    if
    :: RQ > 0 ->
        claimWake(slot, noIdle);
        atomic {
            if
            :: noIdle && threads < W ->
                assert(slot == NONE && searching == 0 && running < W && nIdle == 0);
                slot = threads; threads++; running++; searching++
            :: else
            fi;
            noIdle = false
        }
    :: else
    fi
}

inline perform(slot) {
    if
    :: slot != NONE -> ev[slot] = true; slot = NONE
    :: else
    fi
}

inline releaseOfferingDrained() {
    if
    :: drained -> drained = false; offer(dplan)
    :: else
    fi;
    atomic {
        checkInvariants();
        L = false
    };
    perform(dplan)
}

/* tiersOwedADrain on the word: a searcher, or W running, will drain. */
inline unlockPool() {
    releaseOfferingDrained();
    do
    :: pending ->
        if
        :: searching != 0 -> break
        :: else
        fi;
        if
        :: running >= W -> break
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

proctype Producer(byte me) {
    byte k = 0;
    bool ok, got, noIdle;
    byte i;
    byte dplan = NONE;
    byte wplan = NONE;

    do
    :: k < J ->
        atomic { shardJobs[me]++; hasJobs[me] = true };
        if
        :: pending ->
            if
            :: searching == 0 && running == 0 -> goto wake   /* 2a: nobody will come */
            :: else -> goto staged
            fi
        :: else
        fi;
        pending = true;                                     /* raise (SC) */
        if
        :: searching != 0 -> goto staged                    /* one SC load of the word: */
        :: running >= W -> goto staged                      /* (the word is one load; the */
        :: else                                             /*  model reads it in steps, which */
        fi;                                                 /*  only adds interleavings) */
wake:
        if
        :: L -> goto locked                                 /* L held: its holder will look */
        :: else
        fi;
        if
        :: nIdle > 0 ->
#ifdef NO_RECHECK
            atomic {                                        /* claims on the look above */
                !IL ->
                searching++; running++; nIdle--;
                assert(stackSize > 0);
                stackSize--; wplan = idleStack[stackSize]; idleStack[stackSize] = 0
            };
#else
            claimWake(wplan, noIdle);
#endif
            if
            :: wplan != NONE -> perform(wplan); goto staged
            :: else                                         /* the claim failed: the word again */
            fi;
            noIdle = false;
            if
            :: searching != 0 -> goto staged
            :: else
            fi;
            if
            :: running >= W -> goto staged
            :: else
            fi
        :: else
        fi;
locked:                                                     /* nobody idle: start one under L */
        tryLockL(ok);
        if
        :: ok -> lockTimeDrain(false); unlockPool()
        :: else
        fi;
staged: k++
    :: else -> break
    od
}

proctype Worker(byte me) {
    bool searchingSelf;
    bool ok, got, noIdle;
    byte i;
    byte plan = NONE;
    byte dplan = NONE;
#ifdef PENDING_BEFORE_WORD
    bool sawPending;
#endif

end_wait:
    ev[me];
    searchingSelf = true;
    do
    :: lockL(); lockTimeDrain(true);
        if
        :: RQ > 0 ->
            atomic { RQ--; ran++ };
            if
            :: searchingSelf ->
                atomic { searchingSelf = false; searching-- };   /* RMW (SC) */
                offer(plan)                                     /* the chain */
            :: else
            fi;
            unlockPool();
            perform(plan)
        :: else ->
#ifndef RESET_AFTER_PUSH
            ev[me] = false;                                     /* reset before the push */
#endif
#ifdef PENDING_BEFORE_WORD
            sawPending = pending;
#endif
            atomic {                                            /* IL: push, one RMW */
                !IL ->
                idleStack[stackSize] = me; stackSize++;
                if :: searchingSelf -> searchingSelf = false; searching-- :: else fi;
                running--; nIdle++;
                assert(stackSize == nIdle)
            };
#ifdef RESET_AFTER_PUSH
            ev[me] = false;                                     /* the old place: too late */
#endif
#ifdef PENDING_BEFORE_WORD
            if
            :: !sawPending ->
                atomic { checkInvariants(); L = false };
                goto end_wait
            :: else
            fi;
#endif
            unlockPool();
            perform(plan);
            goto end_wait
        fi
    od
}

active proctype Quiescence() {
    byte j;
    timeout ->
    assert(ran == TOTAL);
    do
    :: j < NP -> assert(shardJobs[j] == 0 && !hasJobs[j]); j++
    :: else -> break
    od;
    assert(!pending && RQ == 0 && !L && !IL);
    assert(searching == 0 && running == 0 && nIdle == threads)
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
