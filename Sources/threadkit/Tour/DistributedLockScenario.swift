// DistributedLockScenario: the Threading Programming Guide's NSDistributedLock: two processes
// contend for a lock in a shared directory; the holder crashes; the lock stays taken until the
// survivor sees the holder is dead and breaks it.
import ChildProcessRoles
import Glibc
import ThreadKit

enum DistributedLockScenario {
    static let scenario = Scenario(
        name: "distributed-lock", title: "two processes, a crashed holder, and breakLock",
        source: "Threading Programming Guide, \"Using an NSDistributedLock Object\""
    ) { say in
        let path = "/tmp/threadkit-tour-\(getpid()).lock"
        defer { unlink(path) }
        let lock = try TKDistributedLock(path: path)
        say.say("child process: TKDistributedLock(path: \"\(path)\").tryLock() and hold it")
        let child = try ChildLauncher("dlock-hold", [path])
        let deadline = ContinuousClock.now + .seconds(30)
        while lock.holder?.pid != child.pid && ContinuousClock.now < deadline { TKThread.sleep(for: .milliseconds(2)) }
        let taken = lock.tryLock()
        let holder = lock.holder
        say.say(
            "tour process: tryLock() → \(taken) (never blocks); holder pid \(holder?.pid ?? 0), "
                + "taken at \(holder.map { "\($0.date)" } ?? "?")")
        try say.check(!taken && holder?.pid == child.pid, "the child did not hold the lock")
        kill(child.pid, SIGKILL)
        let status = child.wait()
        say.say("kill -9 the holder (exit status \(status)): it never unlocks")
        let stillTaken = !lock.tryLock()
        let dead = lock.holder?.isDefinitelyDead ?? false
        say.say("tryLock() → \(!stillTaken): the lock outlives its crashed holder; holder.isDefinitelyDead → \(dead)")
        try say.check(stillTaken && dead, "the crashed holder's lock was not kept, or not recognised as dead")
        let broke = try lock.breakLockIfHolderIsDead()
        let acquired = lock.tryLock()
        say.say(
            "breakLockIfHolderIsDead() → \(broke) (breakLock() checked: only a dead holder's lock, and only once "
                + "among racing breakers), then tryLock() → \(acquired)")
        try lock.unlock()
        try say.check(broke && acquired, "could not break the dead holder's lock and take it")
        return "the lock excluded the second process, survived the crash, and was recovered with breakLock"
    }
}
