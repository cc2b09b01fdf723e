// ChildSupport: the small helpers the roles share — unbuffered console writes, polling until a
// deadline, a shared mutable box, a minimal joinable POSIX thread. Copies of the tour's
// Sources/threadkit/Support/{Console,Polling,SharedBox,SpawnThread}.swift (a few lines each): the
// test child does not link the shipped CLI, and the CLI must not link test code.
import Glibc

/// Unbuffered writes to standard output and error, so that lines written by several threads and
/// processes appear in the order they were written. Any thread.
enum Console {
    static func out(_ line: String) { write(1, line + "\n") }
    static func err(_ line: String) { write(2, line + "\n") }

    private static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }
}

/// Polls `condition` every millisecond until it holds (true) or `deadline` passes (false).
func pollUntil(_ deadline: ContinuousClock.Instant, _ condition: () -> Bool) -> Bool {
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        usleep(1_000)
    }
    return true
}

/// A mutable value shared between a role's threads. It does no locking of its own: every use
/// states which lock guards it, or that one thread owns it until it is joined.
final class SharedBox<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

/// A minimal joinable POSIX thread, independent of TKThread (what some roles judge). Each handle
/// is joined once, by the thread that spawned it.
final class SpawnedThread {
    private var handle = pthread_t()

    private final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    init(_ body: @escaping @Sendable () -> Void) {
        // safety: the retained box is released exactly once, by the new thread (takeRetainedValue).
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let r = pthread_create(
            &handle, nil,
            { raw in
                let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
                box.body()
                return nil
            }, box)
        if r != 0 { fatalError("ThreadKitTestChild: pthread_create failed with \(r)") }
    }

    func join() {
        pthread_join(handle, nil)
    }
}
