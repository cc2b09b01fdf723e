// OperationJudges: independent judges for the operation tests, built on pthread mutexes (not on
// ThreadKit): an ordered event log, a concurrency meter that remembers its peak, and a seeded
// random generator so a failing random graph can be replayed from its printed seed.
import Foundation

/// Events in the order they happened, as seen under one pthread mutex.
final class EventLog: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var events: [String] = [] // guarded by mutex
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }

    func append(_ event: String) {
        pthread_mutex_lock(&mutex)
        events.append(event)
        pthread_mutex_unlock(&mutex)
    }

    var all: [String] {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return events
    }

    /// The position of `event` in the log, nil if absent.
    func index(of event: String) -> Int? { all.firstIndex(of: event) }
}

/// How many bodies run at once, and the most that ever did.
final class ConcurrencyMeter: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var current = 0, highest = 0 // guarded by mutex
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }

    func enter() {
        pthread_mutex_lock(&mutex)
        current += 1
        highest = max(highest, current)
        pthread_mutex_unlock(&mutex)
    }
    func leave() {
        pthread_mutex_lock(&mutex)
        current -= 1
        pthread_mutex_unlock(&mutex)
    }
    var peak: Int {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return highest
    }
}

/// SplitMix64: small, fast, and the same sequence for the same seed on every machine.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
