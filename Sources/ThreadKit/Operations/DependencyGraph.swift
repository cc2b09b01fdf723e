// DependencyGraph: adding and removing dependencies between operations, and refusing cycles
// (docs/Operations.md, "Dependencies"). Any thread. `lock` serializes every edit of the graph, so
// a cycle search sees a graph nobody changes under it, and two edits that would together close a
// cycle (a → b on one thread, b → a on another) are checked one after the other.
//
// Lock order: DependencyGraph.lock → one TKOperation.lock at a time (never two together).
// Readers of the edge lists: the cycle search, under this lock alone (every writer holds it);
// `resolveDependents` and `dependencies`, under the operation's lock (every writer holds it too).

enum DependencyGraph {
    static let lock = DispatchLock()

    /// `operation` depends on `dependency` from now on.
    static func add(_ dependency: TKOperation, to operation: TKOperation) throws {
        if dependency === operation {
            throw TKError(
                .dependencyCycle,
                "\(operation.described).addDependency(itself): an operation cannot depend on itself "
                    + "(it would wait for itself forever). Fix: remove this addDependency call.")
        }
        lock.lock()
        defer { lock.unlock() }
        if operation.dependencyList.contains(where: { $0 === dependency }) { return }
        // A cycle needs a path dependency → … → x → operation: dependency must depend on something
        // and something must depend on operation. Growing a chain at either end fails one of these.
        if !dependency.dependencyList.isEmpty && !operation.dependentList.isEmpty,
            let path = cycle(adding: dependency, to: operation)
        {
            let chain = path.map(\.described).joined(separator: " → ")
            throw TKError(
                .dependencyCycle,
                "\(operation.described).addDependency(\(dependency.described)) would close a "
                    + "dependency cycle (each waits for the next): \(chain). None of them "
                    + "could ever start. Fix: remove one of these dependencies.")
        }
        operation.lock.withLock { operation.dependencyList.append(dependency) }
        let waiterPending = OperationState.phase(operation.state.load(ordering: .acquiring)) == OperationState.pending
        dependency.lock.withLock {
            let s = dependency.state.bitwiseOr(OperationState.hasDependents, ordering: .acquiringAndReleasing).oldValue
            // Counted only while the dependency is unresolved: its resolution (under this same lock)
            // then finds this link in its snapshot and takes the count back.
            let counted = s & OperationState.resolved == 0 && waiterPending
            if counted { operation.state.wrappingAdd(OperationState.countUnit, ordering: .acquiringAndReleasing) }
            dependency.dependentList.append(DependentLink(operation: operation, counted: counted))
        }
    }

    /// `operation` no longer depends on `dependency`; if it was the last thing it waited for, it
    /// becomes ready.
    static func remove(_ dependency: TKOperation, from operation: TKOperation) {
        lock.lock()
        let removed = operation.lock.withLock { () -> Bool in
            guard let i = operation.dependencyList.firstIndex(where: { $0 === dependency }) else { return false }
            operation.dependencyList.remove(at: i)
            return true
        }
        var release = false
        if removed {
            dependency.lock.withLock {
                guard let i = dependency.dependentList.firstIndex(where: { $0.operation === operation }) else { return }
                // Not resolved yet: its resolution will not see this link, so the count is taken
                // back here. Resolved: the resolver took it (or will, from its snapshot).
                let s = dependency.state.load(ordering: .acquiring)
                release = dependency.dependentList[i].counted && s & OperationState.resolved == 0
                dependency.dependentList.remove(at: i)
            }
        }
        lock.unlock()
        if release { operation.dependencyResolved() }
    }

    /// The cycle `operation → dependency → … → operation` (each waiting for the next) that adding
    /// the dependency would close, or nil. Caller holds `lock`.
    ///
    /// A cycle exists iff `operation` is reachable from `dependency` along dependencies, or — the
    /// same question asked the other way — `dependency` is reachable from `operation` along
    /// dependents. Both searches run in lockstep, one node each in turn, and the first to finish
    /// answers: the cost is twice the smaller of the two reachable sets. A chain grown at either
    /// end (a new operation depending on the last, or the last depending on a new one) is then
    /// checked in constant time instead of by walking the whole chain.
    private static func cycle(adding dependency: TKOperation, to operation: TKOperation) -> [TKOperation]? {
        var forward = Search(from: dependency, to: operation, alongDependencies: true)
        var backward = Search(from: operation, to: dependency, alongDependencies: false)
        while true {
            switch forward.step() {
            case .found(let path): // dependency → … → operation: operation waits, via dependency, for itself
                return [operation] + path
            case .exhausted: return nil
            case .searching: break
            }
            switch backward.step() {
            case .found(let path): // operation ← … ← dependency along dependents: reversed, the same chain
                return [operation] + path.reversed()
            case .exhausted: return nil
            case .searching: break
            }
        }
    }

    /// An iterative depth-first search that can be advanced one node at a time.
    private struct Search {
        enum Step { case found([TKOperation]), exhausted, searching }

        let target: TKOperation
        let alongDependencies: Bool
        private var stack: [TKOperation]
        /// Where each visited node was reached from (for the path in the error message).
        private var parent: [ObjectIdentifier: TKOperation] = [:]

        init(from start: TKOperation, to target: TKOperation, alongDependencies: Bool) {
            self.target = target
            self.alongDependencies = alongDependencies
            stack = [start]
            parent[ObjectIdentifier(start)] = start
        }

        mutating func step() -> Step {
            guard let node = stack.popLast() else { return .exhausted }
            let next = alongDependencies ? node.dependencyList : node.dependentList.compactMap(\.operation)
            for candidate in next {
                if candidate === target { return .found(path(to: node) + [candidate]) }
                if parent[ObjectIdentifier(candidate)] == nil {
                    parent[ObjectIdentifier(candidate)] = node
                    stack.append(candidate)
                }
            }
            return .searching
        }

        /// From the start to `node`, in search order.
        private func path(to node: TKOperation) -> [TKOperation] {
            var path = [node]
            var current = node
            while let p = parent[ObjectIdentifier(current)], p !== current {
                path.append(p)
                current = p
            }
            return path.reversed()
        }
    }
}
