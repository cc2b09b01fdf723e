// TKSocketPort+Peers: who may connect to a listening Unix-socket port. The kernel records the
// credentials of the connecting process (SO_PEERCRED, as of its connect); the I/O loop thread reads
// them for each accepted connection and checks them against the port's `allowedPeers` with no lock
// held (a `.custom` rule is user code). The socket file's mode (0600 unless chosen) is the first
// fence; this check is the second, and the one that still holds when the mode is opened up.
import CThreadKit
import Glibc

/// The process at the other end of a Unix-socket connection, as the kernel recorded it when the
/// process connected.
public struct TKPeerCredentials: Sendable, Equatable, CustomStringConvertible {
    /// The peer's process id, as the kernel reports it to this process (SO_PEERCRED).
    public let pid: Int32
    /// The peer's effective user id.
    public let uid: UInt32
    /// The peer's effective group id.
    public let gid: UInt32

    /// Credentials with these ids (for testing a `PeerRule`; real ones come from the kernel).
    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// `pid P, uid U, gid G`.
    public var description: String { "pid \(pid), uid \(uid), gid \(gid)" }
}

extension TKSocketPort {
    /// Which peers a listening Unix-socket port accepts (`allowedPeers`).
    public enum PeerRule: Sendable, CustomStringConvertible {
        /// Processes running as this process's effective user (the default).
        case sameUser
        /// Any process that can open the socket file (its mode decides).
        case anyUser
        /// Processes running as one of these users.
        case users([UInt32])
        /// Processes for which the closure returns true. Runs on the I/O loop's thread, once per
        /// connection, with no lock held.
        case custom(@Sendable (TKPeerCredentials) -> Bool)

        /// Whether the rule accepts `peer`. `.custom` runs its closure.
        public func allows(_ peer: TKPeerCredentials) -> Bool {
            switch self {
            case .sameUser: return peer.uid == geteuid()
            case .anyUser: return true
            case .users(let uids): return uids.contains(peer.uid)
            case .custom(let allows): return allows(peer)
            }
        }

        /// The rule as written in Swift, with the uid `.sameUser` stands for: `.sameUser (uid 1000)`.
        public var description: String {
            switch self {
            case .sameUser: return ".sameUser (uid \(geteuid()))"
            case .anyUser: return ".anyUser"
            case .users(let uids): return ".users(\(uids))"
            case .custom: return ".custom"
            }
        }
    }

    /// Why the peer on `fd` is refused, or nil if `rule` admits it.
    func refusal(ofPeerOn fd: Int32, by rule: PeerRule) -> String? {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
        let rc = tk_peer_credentials(fd, &pid, &uid, &gid)
        guard rc == 0 else {
            return "the peer's credentials cannot be read (\(SystemCall.errorName(-rc)))"
        }
        let peer = TKPeerCredentials(pid: pid, uid: uid, gid: gid)
        guard !rule.allows(peer) else { return nil }
        return
            "the peer (\(peer)) is not allowed by allowedPeers \(rule). Fix: connect as an allowed user, or set allowedPeers on the listening port"
    }
}
