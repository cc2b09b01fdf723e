// TKDistributedLock+Liveness: deciding from an owner record whether its holder is provably dead
// (issue 15, item 9). Breaking the lock of a live holder makes two holders, so every doubt counts
// as alive: another host, another boot (two machines can share a host name), another PID
// namespace (a container: its pid 42 is not ours), an older record without boot or namespace, and
// a process that exists but whose /proc entry this process cannot read (hidepid=2) or whose start
// time was not recorded. Dead is proved by: no process with that pid at all (kill(pid, 0) fails
// with ESRCH, which hidepid does not hide), or a /proc entry that shows a zombie or a process
// started at another time (the pid was reused). Pure reads of /proc; any thread.
import Glibc

extension TKDistributedLock {
    /// The fields of an owner record that decide liveness.
    struct OwnerRecord {
        let host: String
        let pid: Int32
        /// /proc/PID/stat field 22 of the holder when it wrote the record; 0 if it could not read it.
        let start: UInt64
        let bootID: String
        let pidNamespace: String

        /// Whether the holder is provably dead, and why (or why not).
        func deathProof() -> (dead: Bool, verdict: String) {
            guard host == SystemCall.hostName else { return (false, "held from another host (\(host))") }
            guard !bootID.isEmpty, !pidNamespace.isEmpty else {
                return (false, "the record names no boot or PID namespace (written by an older ThreadKit): cannot prove death")
            }
            guard bootID == SystemCall.bootID else {
                return (false, "written in another boot (\(bootID)): another machine with this host name may hold it")
            }
            guard pidNamespace == SystemCall.pidNamespace else {
                return (false, "held from another PID namespace (\(pidNamespace)): its pid \(pid) is not ours to check")
            }
            guard pid > 0 else { return (false, "no valid pid in the record") }
            if kill(pid, 0) != 0 && errno == ESRCH { return (true, "no process \(pid) exists") }
            guard let process = SystemCall.processStart(pid) else {
                return (false, "process \(pid) exists but its /proc entry cannot be read (hidepid?): cannot prove death")
            }
            if process.state == "Z" { return (true, "process \(pid) is a zombie") }
            guard start != 0 else { return (false, "process \(pid) exists and the record has no start time to compare") }
            if process.start != start { return (true, "pid \(pid) now names another process (started at \(process.start), not \(start))") }
            return (false, "process \(pid) is alive")
        }
    }
}
