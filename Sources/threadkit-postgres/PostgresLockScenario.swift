// PostgresLockScenario: the distributed lock beyond one machine. A child process holds a
// TKPostgresLock and is killed with SIGKILL: unlike the lock file of `distributed-lock`, the lock
// is free at once (the server ends the dead session). Then fencing: the lock is broken under a
// holder, which is told, and its stale write is refused by a fenced store. Runs when
// TK_POSTGRES_URL names a reachable server; otherwise says how to start one.
// Run by `threadkit-postgres tour` (main.swift), not by `threadkit tour`, which lists it with that
// command: this scenario links ThreadKitPostgres and PostgresNIO, the rest of the tour ThreadKit only.
#if Postgres
    import ChildProcessRoles
    import Glibc
    import ThreadKit
    import ThreadKitPostgres

    enum PostgresLockScenario {
        static let scenario = postgresScenario(
            name: "distributed-lock-postgres", title: "a lock on PostgreSQL: crash-safe, with fencing tokens",
            source: "SPEC §9; Kleppmann, \"How to do distributed locking\"; PostgreSQL advisory locks"
        ) { say, url in
            let name = "tour-\(getpid())"
            let lock = try TKPostgresLock(name: name, url: url)
            say.say("child process: TKPostgresLock(name: \"\(name)\").lock(before:) and hold it")
            let child = try ChildLauncher("pglock-hold", [url, name])
            // Wait for the child's recorded acquisition (its token), not just its hold of the advisory
            // lock: between the two, `currentHolder()` returns a holder with no client or token. The
            // holder printed and compared below is the one the wait saw.
            var holder: TKPostgresLock.Holder?
            try say.check(
                pollUntil(.now + .seconds(30)) {
                    holder = (try? lock.currentHolder()) ?? nil
                    return holder?.token != nil
                }, "the child never took the lock")
            say.say(
                "tour process: tryLock() → \(try lock.tryLock()); holder: \(holder?.client ?? "?"), fencing token \(holder?.token ?? 0), "
                    + "server session \(holder?.serverPID ?? 0)")
            kill(child.pid, SIGKILL)
            _ = child.wait()
            let start = ContinuousClock.now
            let acquired = try lock.lock(before: .now + .seconds(10))
            say.say(
                "kill -9 the holder: lock(before:) → \(acquired) after \(ContinuousClock.now - start); the server ended the dead "
                    + "session, so there is no stale lock to break; token \(lock.fencingToken ?? 0) > \(holder?.token ?? 0)")
            try say.check(acquired && (lock.fencingToken ?? 0) > (holder?.token ?? .max), "the crashed holder's lock was not released")

            let store = try TKPostgresFencedStore(resource: name, configuration: lock.configuration)
            let oldToken = lock.fencingToken ?? 0
            try store.write("written by the tour process", token: oldToken)
            let told = TKDispatchSemaphore(value: 0)
            let other = try TKPostgresLock(name: name, url: url)
            let breaker = try TKPostgresLock(name: name, url: url)
            try lock.unlock()
            // Written by onLost (the lock's notification queue) before `told` is signalled; read here after the wait.
            let lostBox = SharedBox<String>("")
            let paused = try TKPostgresLock(name: name, url: url) { loss in
                lostBox.value = loss.error.message
                told.signal()
            }
            try say.check(try paused.tryLock(), "could not take the lock again")
            let pausedToken = paused.fencingToken ?? 0
            say.say("a holder takes the lock (token \(pausedToken)) and then stalls (think: a long GC pause)")
            let broken = try breaker.breakLock()
            let wasTold = told.wait(until: .now + .seconds(10)) == .success
            say.say(
                "breakLock() from another object ended session \(broken?.serverPID ?? 0) of \(broken?.client ?? "?"); "
                    + "the holder's onLost: \(wasTold ? lostBox.value : "(not called)")")
            try say.check(wasTold, "the holder was not told it lost the lock")
            try say.check(try other.lock(before: .now + .seconds(10)), "the next holder did not get the lock")
            try store.write("written by the next holder", token: other.fencingToken ?? 0)
            do {
                try store.write("stale write from the stalled holder", token: pausedToken)
                try say.check(false, "the fenced store accepted a stale token")
            } catch let error as TKError {
                say.say("the stalled holder wakes and writes with token \(pausedToken): refused — \(error.message.prefix(90))…")
            }
            try other.unlock()
            return "a crashed holder freed the lock at once, and a holder that lost it could not overwrite the next holder's write"
        }
    }
#endif
