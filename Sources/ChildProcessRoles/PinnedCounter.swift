// PinnedCounter: an actor whose executor is given at creation (a run loop or a queue), for the
// executor tests and the child roles that check where such an actor's jobs run. Its count is
// isolated to the actor.
import ThreadKit

package actor PinnedCounter {
    private let executor: UnownedSerialExecutor
    package private(set) var count = 0
    package init(_ executor: UnownedSerialExecutor) { self.executor = executor }
    package nonisolated var unownedExecutor: UnownedSerialExecutor { executor }
    package func increment() -> Int {
        count += 1
        return count
    }
}
