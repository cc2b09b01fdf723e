/*
 * PoolWedge.pml — the dispatch pool's wake protocol with both tiers (normal and background), and
 * the wedge of 2026-11-25: one wake slot in DispatchPool.Actions for both tiers.
 * Checked by Models/check.sh: with -DONE_SLOT spin must FIND the stuck state; without it (one
 * slot per tier, the fix) the exhaustive search must be clean. See Models/README.md.
 *
 * THE BUG
 *   DispatchPool.nextJob, for a normal worker that takes a job while it was searching, offers to
 *   its own tier (the chain: an idle or new normal worker N is counted running and searching and
 *   planned in `actions`), and then, when background work waits and the normal tier's last job
 *   was taken or enough normal jobs started for it to age, offers to the background tier in the
 *   same locked section (background worker B planned in the same `actions`). With one slot the
 *   second plan overwrote the first: N stayed counted searching and was never woken (or never
 *   started), the normal tier's `searching` stayed 1, every later offer to it saw a searcher and
 *   woke nobody, producers skipped the lock on searchingMirror != 0, and nothing ran any more.
 *
 * WHAT IS MODELLED (the same protocol as PoolWake.pml, per tier; read its header for the mapping
 * to the Swift functions, the memory model and the common abstractions)
 *   - Tier 0 (normal): NWN worker processes, width W. Tier 1 (background): NWB worker processes
 *     (its thread cap), width W. Worker ids 0..NWN-1 are normal, NWN.. background.
 *   - Producers (by default one, submitting normal, normal, background, normal; -DTWO_PRODUCERS:
 *     one submitting three normal jobs and one submitting a background job) go through the stage
 *     (InjectionStage.stage + DispatchPool.submitShared: steps 1-5 and 2a of PoolWake.pml, steps 4
 *     and 2a on the mirrors of the job's tier).
 *   - drain notes the tiers that received jobs (InjectionStage.drainedTiers);
 *     releaseOfferingDrained offers each with its own Actions (as the Swift code does).
 *   - nextJob (normal worker): pop from its tier; if it was searching: searching--, offer to its
 *     tier (chain); then if background work waits and (no normal work is left, or — a
 *     nondeterministic choice standing for RunQueues.backgroundPassesComplete — enough normal jobs
 *     started): offer to the background tier, into the SAME section's Actions. Going idle with
 *     background work waiting: offer to the background tier. A background worker only chains.
 *   - Actions: ONE_SLOT = one plan for both tiers, a later plan overwrites (the bug); otherwise
 *     one slot per tier (DispatchPool.Actions' wakeNormal/wakeBackground), and planning into a
 *     full slot is an assertion failure (Actions.wake's assertion).
 *
 * EXTRA ABSTRACTIONS
 *   - The background admission rule (aging: RunQueues.backgroundAdmissible,
 *     offerAgingBackgroundLocked, idle deadlines) is replaced by "always admissible" for the
 *     tier's own offers and by the nondeterministic choice above in nextJob: an
 *     over-approximation of when background offers happen, so every interleaving of the real
 *     rule is among those checked.
 *   - No monitor thread (it too offers both tiers in one section, with the same per-tier slots).
 *
 * PROPERTIES: as PoolWake.pml, per tier (P1 quiescence: every job ran, every started worker
 * parked idle, no searcher left; P2 counters at every release of the lock; P3 one plan per tier
 * per section, per-tier variant only; P4 no cycles, with -DNP). -DONLY_JOBS keeps only P1's
 * "every job ran", so that with -DONE_SLOT spin shows the stranded job itself rather than the
 * first symptom it meets (a searcher that never comes). The `MSC:` printf lines are not run
 * during the search; they tell the story when a trail is replayed (spin -t).
 * Sizes: one producer (N, N, B, N), W = 2, two normal and one background worker by default;
 * -DTWO_PRODUCERS (clean): 26.5 M states, about 60 s and 1.5 GB with -DCOLLAPSE, by hand.
 */

#ifndef W
#define W 2             /* width of each tier */
#endif
#ifndef NWN
#define NWN 2           /* normal worker processes (the normal tier's thread cap) */
#endif
#ifndef NWB
#define NWB 1           /* background worker processes (the background tier's thread cap) */
#endif
/* The producers and their jobs: producer p submits J<p> jobs; bit k of T<p> is the tier of its
   k-th job (0 normal, 1 background). Default: one producer submitting normal, normal, background,
   normal (the smallest program with which the wedge strands a job). -DTWO_PRODUCERS: producer 0
   submits three normal jobs, producer 1 one background job. */
#ifdef TWO_PRODUCERS
#define NP 2
#define J0 3
#define T0 0
#define J1 1
#define T1 1
#define TOTAL (J0 + J1)
#else
#define NP 1
#define J0 4
#define T0 4            /* 0b0100: N, N, B, N */
#define TOTAL J0
#endif
#define NW (NWN + NWB)
#define NONE 255
#define CAP(t) ((t) == 0 -> NWN : NWB)
#define BASE(t) ((t) == 0 -> 0 : NWN)
#define TIER(id) ((id) < NWN -> 0 : 1)

#ifdef ONE_SLOT
#define SLOT(t) plan[0]
#else
#define SLOT(t) plan[t]
#endif

/* --- shared state --------------------------------------------------------------------------- */
byte shardJobs[2 * NP]; /* producer p's shard: [2p] normal jobs, [2p + 1] background jobs */
bool hasJobs[NP];
bool pending;
bool L;
/* guarded by L */
byte RQ[2];
byte idleStack[NW];     /* per tier: idleStack[BASE(t) ..], nIdle[t] entries */
byte nIdle[2];
short running[2];
short searching[2];
short threads[2];
bool drained[2];        /* InjectionStage.drainedTiers */
/* read without L */
short searchingMirror[2];
short runningMirror[2];
bool ev[NW];
byte ran;

inline lockL() { atomic { !L -> L = true } }
inline tryLockL(ok) {
    atomic { if :: !L -> L = true; ok = true :: else -> ok = false fi }
}

inline checkTier(t) {
    assert(searching[t] >= 0 && running[t] >= 0 && searching[t] <= running[t]);
    assert(running[t] + nIdle[t] == threads[t] && threads[t] <= CAP(t))
}
inline checkInvariants() { checkTier(0); checkTier(1) }

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
                    if :: shardJobs[2 * i] > 0 -> drained[0] = true :: else fi;
                    if :: shardJobs[2 * i + 1] > 0 -> drained[1] = true :: else fi;
                    RQ[0] = RQ[0] + shardJobs[2 * i]; shardJobs[2 * i] = 0;
                    RQ[1] = RQ[1] + shardJobs[2 * i + 1]; shardJobs[2 * i + 1] = 0;
                    hasJobs[i] = false
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

/* offerWorkLocked(tier t) into `slot` (the section's Actions). The L-guarded decision and
   counter changes are folded into the store of searchingMirror[t]; the store of runningMirror[t]
   is a step of its own. */
inline offer(t, slot) {
    atomic {
        if
        :: searching[t] == 0 && running[t] < W && RQ[t] > 0 && (nIdle[t] > 0 || threads[t] < CAP(t)) ->
#ifndef ONE_SLOT
            assert(slot == NONE);                   /* P3: Actions.wake's assertion */
#endif
            if
            :: slot != NONE ->                      /* only with ONE_SLOT (else asserted above) */
                printf("MSC: the plan to wake worker %d is overwritten\n", slot)
            :: else
            fi;
            if
            :: nIdle[t] > 0 ->                      /* wake the most recently idle */
                nIdle[t]--; slot = idleStack[BASE(t) + nIdle[t]]; idleStack[BASE(t) + nIdle[t]] = 0;
                printf("MSC: offer to tier %d: wake idle worker %d (now searching)\n", t, slot)
            :: else ->                              /* start one */
                slot = BASE(t) + threads[t]; threads[t]++;
                printf("MSC: offer to tier %d: start worker %d (now searching)\n", t, slot)
            fi;
            running[t]++; searching[t]++;
            searchingMirror[t] = searching[t];            /* SC stores, under L */
            runningMirror[t] = running[t]
        :: else                                     /* nothing, or at the cap */
        fi
    }
}

inline performSlot(slot) {
    if
    :: slot != NONE -> printf("MSC: set the event of worker %d\n", slot); ev[slot] = true; slot = NONE
    :: else
    fi
}
inline perform() { performSlot(plan[0]); performSlot(plan[1]) }

/* releaseOfferingDrained: one Actions per tier (dplan[t]) */
inline releaseOfferingDrained() {
    if
    :: drained[0] -> drained[0] = false; offer(0, dplan[0])
    :: else
    fi;
    if
    :: drained[1] -> drained[1] = false; offer(1, dplan[1])
    :: else
    fi;
    atomic { checkInvariants(); L = false };        /* unlockSequentiallyConsistent */
    performSlot(dplan[0]); performSlot(dplan[1])
}

inline unlockPool() {
    releaseOfferingDrained();
    do
    :: pending ->
        tryLockL(ok);
        if
        :: ok -> lockTimeDrain(false); releaseOfferingDrained()
        :: else -> break
        fi
    :: else -> break
    od;
    ok = false
}

proctype Producer(byte me; byte jobs; byte tiers) {
    byte k = 0;
    byte jt;                    /* the job's tier */
    bool ok, got;
    byte i;
    byte dplan[2];

    dplan[0] = NONE; dplan[1] = NONE;
    do
    :: k < jobs ->
        atomic {
            jt = (tiers >> k) & 1; shardJobs[2 * me + jt]++; hasJobs[me] = true;
            printf("MSC: producer %d stages a job of tier %d\n", me, jt)
        };
        if
        :: pending ->                                       /* step 2a of PoolWake.pml */
            if
            :: atomic { searchingMirror[jt] == 0 && runningMirror[jt] == 0 ->
                        printf("MSC: producer %d finds pending up, nobody in tier %d: tries the lock\n", me, jt) };
               goto try
            :: else -> goto staged
            fi
        :: else
        fi;
        pending = true;
        if
        :: atomic { searchingMirror[jt] != 0 ->             /* of the job's tier */
                    printf("MSC: producer %d raised pending, sees a searcher in tier %d: skips the lock\n", me, jt) };
           goto staged
        :: else
        fi;
        if
        :: atomic { runningMirror[jt] >= W ->
                    printf("MSC: producer %d raised pending, sees tier %d busy: skips the lock\n", me, jt) };
           goto staged
        :: else
        fi;
try:    tryLockL(ok);
        if
        :: ok -> lockTimeDrain(false); unlockPool()
        :: else
        fi;
staged: atomic { k++; jt = 0 }
    :: else -> break
    od
}

proctype Worker(byte me) {
    byte t = TIER(me);
    bool searchingSelf;
    bool ok, got;
    byte i;
    byte plan[2];
    byte dplan[2];

    atomic { plan[0] = NONE; plan[1] = NONE; dplan[0] = NONE; dplan[1] = NONE };
end_wait:
    ev[me];
    searchingSelf = true;
    do
    :: lockL(); lockTimeDrain(true);
        if
        :: RQ[t] > 0 ->
            atomic {                                        /* pop; `ran` counts it run */
                RQ[t]--; ran++;
                printf("MSC: worker %d (tier %d) takes a job (searching: %d)\n", me, t, searchingSelf)
            };
            if
            :: searchingSelf ->
                atomic { searchingSelf = false; searching[t]--; searchingMirror[t] = searching[t] };
                offer(t, SLOT(t))                           /* the chain */
            :: else
            fi;
            if
            :: t == 0 && RQ[1] > 0 && RQ[0] == 0 -> offer(1, SLOT(1))   /* last normal job taken */
            :: t == 0 && RQ[1] > 0 && RQ[0] > 0 ->                      /* backgroundPassesComplete? */
                if
                :: offer(1, SLOT(1))
                :: skip
                fi
            :: else
            fi;
            unlockPool();
            perform()                                       /* then run the job */
        :: else ->                                          /* go idle */
            atomic {
                if :: searchingSelf -> searchingSelf = false; searching[t]-- :: else fi;
                running[t]--;
                idleStack[BASE(t) + nIdle[t]] = me; nIdle[t]++;
                printf("MSC: worker %d (tier %d) parks idle\n", me, t);
                ev[me] = false;                             /* event.reset() under L */
                searchingMirror[t] = searching[t];
                runningMirror[t] = running[t]
            };
            if
            :: t == 0 && RQ[1] > 0 -> offer(1, SLOT(1))   /* no normal work left */
            :: else
            fi;
            unlockPool();
            perform();
            goto end_wait
        fi
    od
}

active proctype Quiescence() {
    byte j;
    timeout ->
    printf("MSC: quiescent: ran %d of %d; normal tier: searching %d running %d idle %d threads %d; run queue %d, staged %d\n",
           ran, TOTAL, searching[0], running[0], nIdle[0], threads[0], RQ[0], shardJobs[0]);
    assert(ran == TOTAL);                                   /* no stuck job */
#ifndef ONLY_JOBS

    do
    :: j < NP -> assert(shardJobs[2 * j] == 0 && shardJobs[2 * j + 1] == 0 && !hasJobs[j]); j++
    :: else -> j = 0; break
    od;
    assert(!pending && RQ[0] == 0 && RQ[1] == 0 && !L);
    do
    :: j < 2 ->
        assert(searching[j] == 0 && running[j] == 0 && nIdle[j] == threads[j]);  /* no lost searcher */
        j++
    :: else -> break
    od
#endif
}

init {
    byte n;
    atomic {
        n = 0;
        do :: n < NW -> run Worker(n); n++ :: else -> break od;
        run Producer(0, J0, T0);
#ifdef TWO_PRODUCERS
        run Producer(1, J1, T1)
#endif
    }
}
