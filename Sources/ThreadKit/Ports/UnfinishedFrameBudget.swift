// UnfinishedFrameBudget: the process-wide cap on the memory that listening socket ports hold for
// frames still arriving (TKSocketPort.unfinishedFrameBudget). Each connection reserves what its
// decoder may grow to before the decoder allocates, and gives back what it no longer holds; a
// connection that cannot reserve is shed, or on an authenticating port waits until there is room
// (TKSocketPort+Receiving.swift). Per connection a frame is bounded by the wire format (64 MiB);
// this bounds the sum over all connections.
//
// Threads: any I/O loop thread reserves and releases; any thread reads or sets the limit. The
// words are relaxed atomics: they publish no other memory, and a reservation racing a change of
// the limit may be judged against either value.
import Synchronization

enum UnfinishedFrameBudget {
    /// 256 MiB: four frames of the largest size at once, or thousands of ordinary ones.
    static let defaultLimit = 256 << 20

    private static let limitWord = Atomic<Int>(defaultLimit)
    private static let heldWord = Atomic<Int>(0)
    private static let waitWord = Atomic<Int>(0)

    /// How many times a connection of an authenticating port started waiting for room (for
    /// tests: the wait, not a closed connection, is what happened).
    static var waits: Int { waitWord.load(ordering: .relaxed) }
    static func countWait() { waitWord.wrappingAdd(1, ordering: .relaxed) }

    static var limit: Int { limitWord.load(ordering: .relaxed) }
    static var held: Int { heldWord.load(ordering: .relaxed) }

    static func setLimit(_ bytes: Int) {
        guard bytes >= 0 else {
            fatalError(
                "ThreadKit misuse: TKSocketPort.unfinishedFrameBudget = \(bytes): a budget cannot be negative. "
                    + "Fix: give a number of bytes (0 refuses every frame that arrives in more than one read; the default is \(defaultLimit))."
            )
        }
        limitWord.store(bytes, ordering: .relaxed)
    }

    /// Takes `bytes` from the budget; false (nothing taken) if that would pass the limit.
    static func reserve(_ bytes: Int) -> Bool {
        var current = heldWord.load(ordering: .relaxed)
        while true {
            guard bytes <= limit - current else { return false }
            let (exchanged, original) = heldWord.compareExchange(expected: current, desired: current + bytes, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    /// Gives back `bytes` (a negative amount takes it without checking: a decoder that grew a
    /// little past its reservation, which malloc's rounding can do).
    static func release(_ bytes: Int) {
        if bytes != 0 { heldWord.wrappingAdd(-bytes, ordering: .relaxed) }
    }
}
