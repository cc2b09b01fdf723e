// Polling: waiting, in the tour and the child roles, for a condition another thread or process
// makes true (a counter, a thread's end), checked every millisecond until a deadline.
import Glibc

/// Polls `condition` every millisecond until it holds (true) or `deadline` passes (false).
package func pollUntil(_ deadline: ContinuousClock.Instant, _ condition: () -> Bool) -> Bool {
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        usleep(1_000)
    }
    return true
}
