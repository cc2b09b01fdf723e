/*
 * RunLoopWake.pml: a run loop's wake-up protocol across a nested run (TKRunLoop).
 *
 * What it models. One loop thread and one other thread (the poster). The loop runs the default
 * mode D (the enclosing run, `TKRunLoop.run(mode:deadline:returnAfterSourceHandled:)`); the first
 * block phase of its pass (`runBlocks` -> `drainBlocks`) runs a block that runs a custom mode C
 * nested (the test's `run(mode: custom, …)` from a perform block). The poster posts a C-mode
 * block that calls `stop()` and a D-mode block that calls `stop()` (`perform(inModes:)` ->
 * `enqueueUnlessClosed`, then `wakeUp` -> `EventPoll.wakeCoalesced`), in that order, at any
 * moment. Every run shares the one wake eventfd (`efd`) and its coalescing flag (`wakePending`):
 *   - a post appends its block under the loop's lock, then writes the eventfd only if it is the
 *     one that raised `wakePending` (exchange, then write: two steps);
 *   - `stop()` sets the innermost run's stop flag and wakes the loop the same way, also from the
 *     loop's own thread;
 *   - a sleep (`TKRunLoop.sleep`) blocks until the eventfd is readable, or only polls (after a
 *     handled source, or when `pollNextSleep` is set, or when its spin saw `wakePending`), drains
 *     the eventfd, and then clears `wakePending`;
 *   - a block phase takes every queued block at its start (`drainBlocks` swaps the list) and runs
 *     those of its mode; the others go back to the queue;
 *   - a nested run puts the enclosing run's stop flag aside and gives it back when it returns;
 *     on return it sets `pollNextSleep` (the fix; -DNO_HANDBACK leaves that out).
 * Perform blocks are not "handled sources", so a pass that only ran blocks sleeps for real.
 * Memory is sequentially consistent, as the Swift code's `wakePending` operations are.
 *
 * Left out: sources, timers, ports, descriptors, deadlines (a run sleeps until woken: a sleep to
 * the deadline is the bug this model looks for), the spin's timing (the spin may or may not see
 * `wakePending`: both are explored).
 *
 * Checked: no invalid end state. The loop ends only when the D-mode `stop` block has run, so a
 * state where the loop sleeps with that block queued and nothing left to wake it is reported.
 * With -DNO_HANDBACK spin must find exactly that (the CI wedge of ci13 and ci32: the nested run's
 * sleep drained the wake-up the D block's post relied on; docs/Reliability.md).
 */

bit wakePending;    /* EventPoll.wakePending */
bit efd;            /* the wake eventfd is readable */
byte qC;            /* C-mode blocks queued (the poster's stop block) */
byte qD;            /* D-mode blocks queued (the poster's stop block) */
bit nestedQueued;   /* the block that runs C nested (queued by the loop itself, first) */
bit stopReq;        /* TKRunLoop.stopRequested: the innermost run's stop flag */
bit pollNext;       /* TKRunLoop.pollNextSleep */
byte runDepth;         /* TKRunLoop.runDepth */

/* wakeCoalesced: exchange, then write; the write is a step of its own. */
inline wake() {
    if
    :: atomic { wakePending == 0 -> wakePending = 1; raised = 1 }
    :: atomic { wakePending == 1 -> raised = 0 }
    fi;
    if
    :: raised -> efd = 1
    :: else ->
        if
        :: _pid == 1 -> printf("MSC: loop's stop(): wakePending already up, writes nothing\n")
        :: else -> printf("MSC: poster: wakePending already up, writes nothing\n")
        fi
    fi
}

/* stop() on the loop's thread (runDepth > 0 here): flag, then wake. */
inline stopHere() {
    stopReq = 1;
    wake()
}

/* TKRunLoop.sleep with poll = mustPoll. */
inline sleepPass(mustPoll) {
    poll = mustPoll || pollNext;
    pollNext = 0;
    if
    :: poll -> efd = 0                  /* only polls: drains what is there */
    :: !poll && wakePending -> efd = 0  /* the spin saw the flag: polls (the write may be late) */
    :: !poll -> printf("MSC: loop: sleeps (depth %d, D blocks queued %d)\n", runDepth, qD);
        efd == 1; efd = 0               /* blocks until the eventfd is readable */
    fi;
    wakePending = 0                     /* cleared after the drain, before the queues are read */
}

proctype Poster() {
    bit raised;
    atomic { qC = qC + 1 };
    printf("MSC: poster: queues the C-mode stop block\n");
    wake();
    atomic { qD = qD + 1 };
    printf("MSC: poster: queues the D-mode stop block\n");
    wake()
}

proctype Loop() {
    bit raised, poll, saved, takeC, takeD, takeNested, ended;
    runDepth = 1;
    do
    :: ended -> break
    :: else ->
        /* The enclosing run's pass in D. Block phase 1: takes the queue. */
        atomic { takeNested = nestedQueued; nestedQueued = 0; takeD = (qD > 0); qD = 0 };
        if
        :: takeNested ->
            /* The nested run of C (run(mode: C, …) from the block). */
            saved = stopReq; stopReq = 0; runDepth = 2;
            printf("MSC: loop: the D pass's first block phase runs C nested\n");
            do
            :: atomic { takeC = (qC > 0); qC = 0 };
               if :: takeC -> stopHere() :: else -> skip fi;
               sleepPass(0);
               atomic { takeC = (qC > 0); qC = 0 };
               if :: takeC -> stopHere() :: else -> skip fi;
               if
               :: stopReq -> stopReq = 0; break
               :: else -> skip
               fi
            od;
            stopReq = saved; runDepth = 1;
            printf("MSC: loop: the nested run returns\n");
#ifndef NO_HANDBACK
            pollNext = 1
#endif
        :: else -> skip
        fi;
        if :: takeD -> stopHere() :: else -> skip fi;
        /* No source was handled: the sleep is a real one unless pollNext says otherwise. */
        sleepPass(0);
        /* Block phase after the sleep. */
        atomic { takeD = (qD > 0); qD = 0 };
        if :: takeD -> stopHere() :: else -> skip fi;
        /* Outcome: the stop ends the enclosing run, which the test's loop thread then leaves. */
        if
        :: stopReq -> stopReq = 0; ended = 1
        :: else -> skip
        fi
    od;
    runDepth = 0;
    assert(qD == 0 && qC == 0)
}

init {
    nestedQueued = 1;   /* posted by the loop's own thread just before the pass: no wake-up */
    atomic {
        run Loop();     /* _pid 1 */
        run Poster()    /* _pid 2 */
    }
}
