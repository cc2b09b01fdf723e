/*
 * Admission.pml — the background admission rule across the stage: a background job must not start
 * while normal work submitted before the start waits, also when that normal work is still staged
 * (its flag raised and left to busy normal workers). Checked by Models/check.sh: clean as the
 * Swift code is, and each of three known holes must be FOUND. See Models/README.md.
 *
 * WHY A MODEL OF ITS OWN
 *   PoolWake.pml and PoolWedge.pml check that no wake-up is lost and no job is stranded; they
 *   replace admission by "always admissible" and leave QoS order out. Three holes in the order
 *   between the tiers reached the Swift code on 2026-11-28 and none of those models could see
 *   them:
 *   - -DDRAIN_OWN_TIER_ONLY: a drain of the background tier did not take the normal tier's staged
 *     jobs, so a background job entered the run queues alone, ahead of normal work staged before
 *     it, and started (0cc7330; ci78 caught it in DispatchPoolTests; fixed in 02e67d9).
 *   - -DPRECHECK_OWN_TIER: the pool's look at the flags before a drain (lockPool's pre-check) used
 *     the tiers before the drain widened them, so a background worker's visit skipped the drain
 *     when only the normal flag was up (02e67d9; fixed in e8c8fb7, and decided in one function,
 *     InjectionStage.tiersToDrain, in 9d7b9df).
 *   - -DLOCAL_NO_STAGE_LOOK: a background worker's next local job looked only at the run queues'
 *     mirror, which does not show staged work (fixed in 9d7b9df: PoolWorker.run also loads the
 *     normal flag).
 *   - -DNO_DRAINING_MARK: that fix as 9d7b9df had it. This model found its window: a holder
 *     lowers the normal flag when it drains and stores the mirror only when it unlocks, so a
 *     background worker that looks at both in between sees neither and starts its local job
 *     while the drained normal work waits. Fixed in the commit after 9d7b9df: a drain that may
 *     lower the normal flag first sets the mirror's "normal work being drained" bit
 *     (DispatchPool.drainStageLocked), and the background worker loads the flag before the
 *     mirror (sequentially consistent, a Dekker pairing: if its flag load sees the flag lowered,
 *     its later mirror load sees the bit or the exact mirror stored at the unlock).
 *     -DMIRROR_FIRST (the background worker loads the mirror before the flag) must be found too:
 *     the order of the two loads is what makes the mark work.
 *
 * WHAT IS MODELLED
 *   - Every normal worker is busy for the whole run (the situation in which producers leave the
 *     normal flag to them), so no normal job ever starts: whether a background start is too early
 *     does not depend on how fast normal work runs, and aging (which needs normal starts) never
 *     admits background work. The normal workers' own visits are among the helper's drains.
 *   - One producer (a thread that is not a worker) submits normal, normal, background
 *     (InjectionStage.stage + DispatchPool.submitShared): stage the job (one step: the shard's
 *     lock), load its tier's flag and raise it if it was down (two steps); if it raised it, try
 *     the pool's lock or not (a nondeterministic choice standing for submitterTriesLock on the
 *     mirrors and the monitor's state), and drain its job's tier if it got it. A submission is
 *     complete when the call returns: the ghost `doneN` counts the normal submissions completed.
 *   - One background worker (PoolWorker.run), which starts with one background job in the run
 *     queue and one in its local queue (both cases of the tests in DispatchPoolTests). Between
 *     jobs: its local queue first (load the run queues' mirror, and — unless
 *     -DLOCAL_NO_STAGE_LOOK — the normal flag; either set: give the local queue back under the
 *     lock, which drains both tiers), else a visit (nextJob: lockPool(draining: background), pop
 *     by the admission rule: background only while the run queues hold no normal job); nothing
 *     admissible: it parks (the model ends it there).
 *   - A helper standing for every other holder of the pool's lock (the monitor's tick, a normal
 *     worker's visit, a holder's drain after unlocking, blocking and unblocking): up to HELPS
 *     times, it takes the lock and drains the normal tier, the background tier or both, chosen
 *     nondeterministically (an over-approximation of who drains what, when).
 *   - A drain (InjectionStage.drain, with the pre-check of DispatchPool.drainStageLocked): widen
 *     the tiers (a background drain takes both; -DDRAIN_OWN_TIER_ONLY: it does not), look at the
 *     flags of the widened tiers (-DPRECHECK_OWN_TIER: of the tiers asked), and if one is up,
 *     lower the raised ones and move their staged jobs into the run queue (one step, under the
 *     pool's lock; the shards' locks and hasJobs bits are left out: PoolWedge.pml checks them).
 *   - The run queues' mirror of normal work (DispatchPool.nonEmptyMirror) is stored at every
 *     unlock, as publishMirrorsLocked does.
 *   - Memory is sequentially consistent, as the Swift code's flag operations and mirror stores
 *     are (the local path's loads are relaxed: on x86 a load sees every locked or sequentially
 *     consistent store completed before it).
 *
 *   - Larger sizes (both together in check.sh): -DTHIEF adds a second background worker that
 *     starts with an empty local queue, so its first visit may steal the first worker's local job
 *     (stealLocked: only after pop said .steal, which a background worker gets only while the run
 *     queues hold no normal job, drained first); -DSECOND_PRODUCER adds a second producer thread
 *     that submits normal, background. The stage's shards are one pool here (the order between
 *     two producers' shards is PoolWedge.pml's). -DSTEAL_WITHOUT_RULE (the thief steals whenever
 *     the run queues hold no background job, normal work or not) must be found.
 *   - A local job is taken out of the local queue before the check (popLocal, under the worker's
 *     local lock) and put back at the front when the check fails (before the lock visit that
 *     gives the queue back), so a thief can take it only then.
 *
 * PROPERTY
 *   A1: when a background job starts, no normal submission had completed before the background
 *   worker began the check that let it start (no normal job ever starts here, so such a job
 *   still waits). Checked by an assertion at each background start.
 */

#define NORMAL 1
#define BACKGROUND 2
#define ALL 3

#ifndef HELPS
#define HELPS 2
#endif

bit lk = 0;                 /* the pool's lock */
byte pending = 0;           /* InjectionStage.pending: a bit per tier */
byte stagedN = 0;           /* staged jobs, per tier */
byte stagedB = 0;
byte queuedN = 0;           /* jobs in the run queues, per tier */
byte queuedB = 1;           /* the background job already in the run queue */
#ifdef THIEF
#define WORKERS 2
#else
#define WORKERS 1
#endif
byte localB[WORKERS];       /* each background worker's local queue (worker 0 starts with one job) */
bit mirrorN = 0;            /* nonEmptyMirror's normal levels, stored at unlock */
byte doneN = 0;             /* ghost: normal submissions completed (returned) */
byte started = 0;           /* ghost: background jobs started */

inline lock() { atomic { lk == 0 -> lk = 1 } }

/* unlockPool: publish the mirror, release (the after-unlock drains are the helper's). */
inline unlock() { atomic { mirrorN = (queuedN > 0); lk = 0 } }

/* DispatchPool.drainStageLocked + InjectionStage.drain, under the pool's lock. */
/* Uses the caller's locals widened, look and raised (Promela declares per process). */
inline drain(asked) {
#ifdef DRAIN_OWN_TIER_ONLY
    widened = asked;
#else
    widened = ((asked & BACKGROUND) != 0 -> ALL : asked);
#endif
#ifdef PRECHECK_OWN_TIER
    look = asked;
#else
    look = widened;
#endif
    if
    :: (pending & look) != 0 ->
#ifndef NO_DRAINING_MARK
        /* DispatchPool.drainStageLocked: before a drain that may lower the normal flag, the mirror
         * shows normal work (its "being drained" bit), so a background worker that loads the flag
         * after it is lowered and the mirror after that sees one or the other. */
        if
        :: (widened & NORMAL) != 0 -> mirrorN = 1
        :: else -> skip
        fi;
#endif
        d_step {
            raised = pending & widened;
            pending = pending & (ALL - widened);
            if
            :: (raised & NORMAL) != 0 -> queuedN = queuedN + stagedN; stagedN = 0
            :: else -> skip
            fi;
            if
            :: (raised & BACKGROUND) != 0 -> queuedB = queuedB + stagedB; stagedB = 0
            :: else -> skip
            fi
            ;
            printf("MSC: pid %d (0 producer, 1 other holder, 2 second producer or init, then the background workers) drains tiers %d: queued now %d normal, %d background\n", _pid, raised, queuedN, queuedB)
        }
    :: else -> skip
    fi;
    widened = 0; look = 0; raised = 0
}

/* One submission of a job of tier `t` (DispatchPool.submitShared). */
/* Uses the caller's local `up`. */
inline submit(t) {
    if
    :: t == NORMAL -> stagedN++
    :: else -> stagedB++
    fi;
    up = ((pending & t) != 0);
    printf("MSC: producer: stages a job of tier %d (flag up already: %d)\n", t, up);
    if
    :: up -> skip
    :: else ->
        pending = pending | t;
        if
        :: atomic { lk == 0 -> lk = 1 }; drain(t); unlock()
        :: skip   /* a searcher or the busy workers of the tier will drain; or the lock was busy */
        fi
    fi;
    up = 0;
    if
    :: t == NORMAL -> d_step { doneN++; printf("MSC: producer: normal submission %d returns\n", doneN) }
    :: else -> skip
    fi
}

active proctype producer() {
    byte widened, look, raised;
    bit up;
    submit(NORMAL);
    submit(NORMAL);
    submit(BACKGROUND)
}

active proctype helper() {
    byte widened, look, raised;
    byte helps = 0;
    do
    :: helps < HELPS ->
        helps++;
        lock();
        if
        :: drain(NORMAL)
        :: drain(BACKGROUND)
        :: drain(ALL)
        fi;
        unlock()
    :: else -> break
    od
}

#ifdef SECOND_PRODUCER
active proctype producer2() {
    byte widened, look, raised;
    bit up;
    submit(NORMAL);
    submit(BACKGROUND)
}
#endif

init {
    /* worker 0's local job, then the workers (pids after the producers and the helper) */
    localB[0] = 1;
    atomic { run backgroundWorker(0);
#ifdef THIEF
    run backgroundWorker(1)
#endif
    }
}

proctype backgroundWorker(byte me) {
    byte widened, look, raised;
    byte before;
    bit staged, m;
    do
    :: atomic { localB[me] > 0 -> before = doneN; localB[me]-- } ->
        /* PoolWorker.run, the local queue: popLocal took the job (under the local lock) and the
         * check begins. */
        staged = 0;
#ifdef MIRROR_FIRST
        m = mirrorN;
#endif
#ifndef LOCAL_NO_STAGE_LOOK
        staged = ((pending & NORMAL) != 0);
#endif
#ifndef MIRROR_FIRST
        /* the mirror after the flag: the drainer stores the mark before it lowers the flag */
        m = mirrorN;
#endif
        printf("MSC: background worker %d: local check (normal flag %d, mirror %d)\n", me, staged, m);
        if
        :: m || staged ->
            /* the job goes back to the front of the local queue (a thief may take it now);
             * giveBack: lockPool() drains both tiers; the local queue goes to the run queue. */
            localB[me]++;
            lock(); drain(ALL); d_step { queuedB = queuedB + localB[me]; localB[me] = 0 }; unlock()
        :: else ->
            printf("MSC: background worker %d: starts its local job (%d normal submissions returned before its check)\n", me, before);
            assert(before == 0);   /* A1 */
            started++
        fi
    :: localB[me] == 0 ->
        /* nextJob: lockPool(draining: background), then pop by the admission rule. */
        before = doneN;
        lock();
        drain(BACKGROUND);
        if
        :: queuedN == 0 && queuedB > 0 ->
            printf("MSC: background worker %d: starts a queued job (%d normal submissions returned before its visit)\n", me, before);
            assert(before == 0);   /* A1 */
            queuedB--; started++;
            unlock()
#ifdef THIEF
        /* pop said .steal: nothing of the tier queued, and (the admission rule) no normal job
         * either; stealLocked takes the newer half of the other worker's local queue (of one
         * job: that job) and starts the first. */
        /* (the take is one step with the look: under the victim's local lock, as popLocal is) */
#ifdef STEAL_WITHOUT_RULE
        :: atomic { queuedB == 0 && localB[1 - me] > 0 -> localB[1 - me]-- } ->
#else
        :: atomic { queuedN == 0 && queuedB == 0 && localB[1 - me] > 0 -> localB[1 - me]-- } ->
#endif
            printf("MSC: background worker %d: steals and starts a job (%d normal submissions returned before its visit)\n", me, before);
            assert(before == 0);   /* A1 */
            started++;
            unlock()
#endif
        :: else ->
            unlock();
            break   /* nothing admissible: it parks (waking it again is PoolWedge.pml's) */
        fi
    od
}
