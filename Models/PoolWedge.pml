/*
 * PoolWedge.pml — the dispatch pool's wake protocol with both tiers (normal and background): the
 * stage's flag per tier, and the wedge of 2026-11-25 (one wake slot in DispatchPool.Actions for
 * both tiers).
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
 *   - The stage's `pending` flag and each shard's `hasJobs` are per tier (InjectionStage.tierBit).
 *     A normal worker's lock-time drain (nextJob's lockPool(draining:)) takes its own tier only,
 *     a producer's (submitShared's tryLockPool(draining:)) its job's tier only; a drain that
 *     includes the background tier takes the normal tier too (InjectionStage.drain: background
 *     work never enters the run queue ahead of normal work staged before it), so a background
 *     worker's drains both; every holder, after
 *     unlocking, loads both flags and, for each raised tier, that tier's searching and running
 *     mirrors, and drains the tiers that no searcher or `W` running workers will drain
 *     (DispatchPool.drainStageAfterUnlock / tiersOwedADrain). -DOWN_TIER_ONLY (a bug): a holder
 *     looks after unlocking only at the tiers it drained at lock time. -DDRAIN_ALL: a worker's
 *     lock-time drain takes both tiers, as every holder's did when the wedge was found (and as
 *     the monitor's and the other holders' still do); the wedge needs it (a normal worker's
 *     section must see background work to offer it), so -DONE_SLOT is checked with it.
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
 * Sizes: one producer (N, N, B, N), W = 2, two normal and one background worker by default
 * (17 M states, 16 s at -O2; its cycle check, 37 M states and 80 s, by hand); -DW=1 -DNWN=1
 * -DNWB=1 -DJ0=4 -DT0=3 (B, B, N, N: a holder leaves the background flag to the busy background
 * worker); -DTWO_PRODUCERS -DJ0=2 -DNWN=1 (N, N and B: catches -DOWN_TIER_ONLY). Plain
 * -DTWO_PRODUCERS (J0 = 3, clean): 38 M states, about a minute, by hand.
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
#ifndef J0
#define J0 3
#endif
#define T0 0
#define J1 1
#define T1 1
#define TOTAL (J0 + J1)
#else
#define NP 1
#ifndef J0
#define J0 4
#endif
#ifndef T0
#define T0 4            /* 0b0100: N, N, B, N */
#endif
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
bool hasJobs[2 * NP];   /* Shard.hasJobs, a bit per tier: [2p + t] */
bool pending[2];        /* InjectionStage.pending, a flag per tier (bits of one word in Swift, each
                           raised and lowered by a read-modify-write, so one tier's never undoes
                           the other's) */
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

inline lockTimeDrain(want0, want1, mayBeStale) {
    /* lockPool's (both tiers) / tryLockPool(draining:)'s (the tiers wanted) `pending` load
       (relaxed in Swift) and drain's read-modify-write that lowers the wanted raised flags, in one
       step: only a holder of L lowers a flag, so the RMW returns what the load saw. After
       lockPool (mayBeStale) the relaxed load may read a stale `false`: the model lets it skip the
       drain whatever it reads. After tryLockPool the thread has just seen the flags it wants
       raised (its own raise, or the SC load of the after-unlock loop), and by coherence its
       relaxed load reads that or a newer value: modelled exact. */
    atomic {
        if
        :: (pending[0] && (want0 || want1)) || (pending[1] && want1) ->  /* a background drain takes normal too */
            got0 = pending[0] && (want0 || want1); got1 = pending[1] && want1;
            if :: got0 -> pending[0] = false :: else fi;
            if :: got1 -> pending[1] = false :: else fi
        :: mayBeStale -> got0 = false; got1 = false     /* a stale read */
        :: else -> got0 = false; got1 = false           /* nothing wanted raised */
        fi
    };
    if
    :: got0 || got1 ->
        i = 0;
        do
        :: i < NP ->
            atomic {                                /* hasJobs load (SC); shard lock, move, clear */
                if
                :: got0 && hasJobs[2 * i] ->
                    if :: shardJobs[2 * i] > 0 -> drained[0] = true :: else fi;
                    RQ[0] = RQ[0] + shardJobs[2 * i]; shardJobs[2 * i] = 0; hasJobs[2 * i] = false
                :: else
                fi;
                if
                :: got1 && hasJobs[2 * i + 1] ->
                    if :: shardJobs[2 * i + 1] > 0 -> drained[1] = true :: else fi;
                    RQ[1] = RQ[1] + shardJobs[2 * i + 1]; shardJobs[2 * i + 1] = 0; hasJobs[2 * i + 1] = false
                :: else
                fi;
                i++
            }
        :: else -> break
        od;
        atomic { got0 = false; got1 = false; i = 0 }
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

/* DispatchPool.tiersOwedADrain for tier t, whose flag the SC load saw raised: owed unless a
   searcher (the first mirror load) or `width` running workers (the second) will drain it. Each
   mirror load is a step of its own. */
inline owedADrain(t, owed) {
    if
    :: searchingMirror[t] != 0 -> owed = false
    :: else ->
        if
        :: runningMirror[t] >= W -> owed = false
        :: else -> owed = true
        fi
    fi
}

/* DispatchPool.unlockPool: releaseOfferingDrained, then drainStageAfterUnlock: while a raised
   tier is owed a drain (the flags' SC load, then each raised tier's mirrors) and the lock is free,
   take it, drain the owed tiers only, release. -DNO_HOLDER_SKIP: drain every raised tier (the
   protocol before the flags were split). -DOWN_TIER_ONLY (a bug, must be caught): a holder looks
   only at the tiers it drained at lock time (`mine0`, `mine1`). */
inline unlockPool(mine0, mine1) {
    releaseOfferingDrained();
    do
    :: atomic { raised0 = pending[0]; raised1 = pending[1] };    /* one SC load of the word */
#ifdef OWN_TIER_ONLY
        raised0 = raised0 && mine0; raised1 = raised1 && mine1;
#endif
#ifdef NO_HOLDER_SKIP
        owed0 = raised0; owed1 = raised1;
#else
        if :: raised0 -> owedADrain(0, owed0) :: else -> owed0 = false fi;
        if :: raised1 -> owedADrain(1, owed1) :: else -> owed1 = false fi;
#endif
        if
        :: owed0 || owed1 ->
            tryLockL(ok);
            if
            :: ok -> lockTimeDrain(owed0, owed1, false); releaseOfferingDrained()
            :: else -> break
            fi
        :: else -> break
        fi
    od;
    atomic { ok = false; raised0 = false; raised1 = false; owed0 = false; owed1 = false }
}

proctype Producer(byte me; byte jobs; byte tiers) {
    byte k = 0;
    byte jt;                    /* the job's tier */
    bool ok, got0, got1, raised0, raised1, owed0, owed1;
    byte i;
    byte dplan[2];

    dplan[0] = NONE; dplan[1] = NONE;
    do
    :: k < jobs ->
        atomic {
            jt = (tiers >> k) & 1; shardJobs[2 * me + jt]++; hasJobs[2 * me + jt] = true;
            printf("MSC: producer %d stages a job of tier %d\n", me, jt)
        };
        if
        :: pending[jt] ->                                   /* step 2a of PoolWake.pml */
            if
            :: atomic { searchingMirror[jt] == 0 && runningMirror[jt] == 0 ->
                        printf("MSC: producer %d finds pending up, nobody in tier %d: tries the lock\n", me, jt) };
               goto try
            :: else -> goto staged
            fi
        :: else
        fi;
        pending[jt] = true;
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
        :: ok -> lockTimeDrain(jt == 0, jt == 1, false); unlockPool(jt == 0, jt == 1)   /* its tier only */
        :: else
        fi;
staged: atomic { k++; jt = 0 }
    :: else -> break
    od
}

proctype Worker(byte me) {
    byte t = TIER(me);
    bool searchingSelf;
    bool ok, got0, got1, raised0, raised1, owed0, owed1;
    byte i;
    byte plan[2];
    byte dplan[2];

    atomic { plan[0] = NONE; plan[1] = NONE; dplan[0] = NONE; dplan[1] = NONE };
end_wait:
    ev[me];
    searchingSelf = true;
    do
    :: lockL();
#ifdef DRAIN_ALL
        lockTimeDrain(true, true, true);                /* lockPool(): both tiers */
#else
        lockTimeDrain(t == 0, t == 1, true);            /* nextJob: normal its own, background both */
#endif
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
            unlockPool(true, true);
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
            unlockPool(true, true);
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
    :: j < NP -> assert(shardJobs[2 * j] == 0 && shardJobs[2 * j + 1] == 0 && !hasJobs[2 * j] && !hasJobs[2 * j + 1]); j++
    :: else -> j = 0; break
    od;
    assert(!pending[0] && !pending[1] && RQ[0] == 0 && RQ[1] == 0 && !L);
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
