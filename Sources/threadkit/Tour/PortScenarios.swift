// PortScenarios: the seeds' port scenarios (SPEC §4): AFNetworking's resident network thread kept
// alive by a port, a secondary thread sending msgid 1000 to the main thread's port and getting an
// answer through its reply port, a notification forwarded to the thread that registered for it
// (the Threading Programming Guide's queue + lock + port), and the same messages between two
// processes over TCP and a Unix socket.
import ChildProcessRoles
import Glibc
import Synchronization
import ThreadKit

enum PortScenarios {
    static let all: [Scenario] = [residentThread, portMessage, notificationForwarding, socketPorts]

    /// AFNetworking's `networkRequestThread`: started once, lazily; a port keeps its loop running.
    enum NetworkThread {
        private static let once = OnceBox()
        nonisolated(unsafe) private static var thread: TKThread? // written once inside `once`
        static let starts = Atomic<Int>(0)

        static var shared: TKThread {
            once.once.run {
                thread = TKThread.detachNewThread(name: "AFNetworking") {
                    starts.wrappingAdd(1, ordering: .relaxed)
                    let loop = TKRunLoop.current
                    loop.add(TKMessagePort(), forMode: .default) // the port that keeps the loop alive
                    loop.run() // never returns: nothing leaves the mode
                }
            }
            return thread!
        }
    }

    final class OnceBox: Sendable { let once = TKOnce() }

    static let residentThread = Scenario(
        name: "resident-thread", title: "a network thread started once, kept alive by a port, fed with perform-on-thread",
        source: "Run-loop article, AFNetworking: networkRequestThread with dispatch_once and [runLoop addPort:[NSMachPort port]]"
    ) { say in
        let ran = Mutex<[String]>([])
        let done = Latch(count: 6)
        let callers = (0..<3).map { caller in
            TKThread.detachNewThread(name: "caller-\(caller)") {
                for request in 0..<2 {
                    do {
                        try NetworkThread.shared.perform {
                            ran.withLock { $0.append("request \(caller).\(request) on \(TKThread.current.name ?? "?")") }
                            done.countDown()
                        }
                    } catch { say.say("perform failed: \(error)") }
                }
            }
        }
        _ = callers
        try say.check(done.wait(until: .now + .seconds(10)), "requests did not run")
        for line in ran.withLock({ $0 }) { say.say(line) }
        say.say("threads started for the network thread: \(NetworkThread.starts.load(ordering: .relaxed)) (3 callers asked at once)")
        say.say("its loop is still running, kept by its port: \(NetworkThread.shared.isExecuting)")
        try say.check(
            NetworkThread.starts.load(ordering: .relaxed) == 1 && NetworkThread.shared.isExecuting, "the network thread was not resident")
        return "one resident thread served 6 requests from 3 threads"
    }

    static let portMessage = Scenario(
        name: "port-message",
        title: "a secondary thread sends msgid 1000 to the main thread's port; the main thread answers through the reply port",
        source: "Threading Programming Guide / CSDN run-loop article: NSMachPort, handlePortMessage, msgid 1000"
    ) { say in
        final class MainSide: TKPortDelegate {
            let say: Narrator
            let handled = Atomic<Int>(0)
            init(_ say: Narrator) { self.say = say }
            func handlePortMessage(_ message: TKPortMessage) {
                if message.msgid == 1000 {
                    say.say(
                        "main thread (\(TKThread.isMainThread ? "main" : "?")): Receive the message that id is 1000 and this is a print task."
                    )
                    let answer = TKPortMessage(
                        sendPort: message.sendPort, receivePort: message.receivePort, components: [.data(Array("done".utf8))])
                    answer.msgid = 1001
                    _ = answer.send(before: .now + .seconds(5))
                }
                handled.wrappingAdd(1, ordering: .relaxed)
            }
        }
        final class WorkerSide: TKPortDelegate {
            let say: Narrator
            let answered = Atomic<Bool>(false)
            init(_ say: Narrator) { self.say = say }
            func handlePortMessage(_ message: TKPortMessage) {
                var text = ""
                if case .data(let bytes)? = message.components.first { text = String(decoding: bytes, as: UTF8.self) }
                say.say("\(TKThread.current.name ?? "?"): answer msgid \(message.msgid) \"\(text)\" on its own port")
                answered.store(true, ordering: .releasing)
            }
        }
        let mainPort = TKMessagePort()
        let mainSide = MainSide(say)
        mainPort.delegate = mainSide
        let loop = TKRunLoop.current
        loop.add(mainPort, forMode: .default)
        let worker = TKThread(name: "secondary") {
            let ownPort = TKMessagePort()
            let side = WorkerSide(say)
            ownPort.delegate = side
            let runLoop = TKRunLoop.current
            runLoop.add(ownPort, forMode: .default)
            let message = TKPortMessage(sendPort: mainPort, receivePort: ownPort, components: [])
            message.msgid = 1000
            say.say("secondary: send msgid 1000 with its own port as the reply port")
            _ = message.send(before: .now + .seconds(1))
            runLoop.run(mode: .default, before: .now + .seconds(5))
        }
        worker.start()
        loop.run(mode: .default, before: .now + .seconds(5))
        worker.join()
        loop.remove(mainPort, forMode: .default)
        try say.check(mainSide.handled.load(ordering: .relaxed) == 1, "the main thread did not get the message")
        return "the message woke the main loop by itself, and the answer reached the secondary thread"
    }

    static let notificationForwarding = Scenario(
        name: "notification-forwarding", title: "a notification posted on a background thread is handled on the thread that registered",
        source: "Threading Programming Guide, \"Delivering Notifications To Particular Threads\": a queue, a lock and a port"
    ) { say in
        /// The guide's forwarder: notifications that arrive on other threads are queued under a
        /// lock and the registering thread's port is poked; its delegate drains the queue.
        final class Forwarder: TKPortDelegate {
            let thread = TKThread.current
            let port = TKMessagePort()
            let lock = TKLock()
            nonisolated(unsafe) var pending: [TKNotification] = [] // guarded by lock
            let handled = Mutex<[String]>([])
            let say: Narrator

            init(_ say: Narrator) {
                self.say = say
                port.delegate = self
                TKRunLoop.current.add(port, forMode: .common)
            }

            func process(_ notification: TKNotification) {
                if TKThread.current !== thread {
                    say.say("\(TKThread.current.name ?? "?"): \(notification.name.rawValue) arrived here → queue it, poke the port")
                    lock.withLock { pending.append(notification) }
                    _ = TKPortMessage(sendPort: port, receivePort: nil, components: []).send(before: .now + .seconds(5))
                    return
                }
                say.say("\(TKThread.isMainThread ? "main thread" : TKThread.current.name ?? "?"): handling \(notification.name.rawValue)")
                handled.withLock { $0.append(notification.name.rawValue) }
            }

            func handlePortMessage(_ message: TKPortMessage) {
                while let next = lock.withLock({ pending.isEmpty ? nil : pending.removeFirst() }) { process(next) }
            }
        }
        let forwarder = Forwarder(say)
        let name: TKNotification.Name = "DataDidDownload"
        let token = TKNotificationCenter.default.addObserver(forName: name, object: nil) { forwarder.process($0) }
        defer { TKNotificationCenter.default.removeObserver(token) }
        let background = TKThread(name: "background") { TKNotificationCenter.default.post(name: name) }
        background.start()
        background.join()
        TKRunLoop.current.run(mode: .default, before: .now + .seconds(5))
        TKRunLoop.current.remove(forwarder.port, forMode: .common)
        try say.check(forwarder.handled.withLock { $0 } == [name.rawValue], "the notification was not forwarded")
        return "posted on the background thread, handled on the registering thread"
    }

    static let socketPorts = Scenario(
        name: "socket-ports", title: "msgid 1000 to another process and back, over loopback TCP and a Unix socket",
        source: "NSSocketPort: the same port messages between processes"
    ) { say in
        final class Replies: TKPortDelegate {
            let got = Mutex<[UInt32]>([])
            func handlePortMessage(_ message: TKPortMessage) { got.withLock { $0.append(message.msgid) } }
        }
        let path = "/tmp/threadkit-tour-\(getpid()).sock"
        for address in ["tcp:0", "unix:\(path)"] {
            let readyPath = "/tmp/threadkit-tour-\(getpid())-ready"
            unlink(readyPath)
            // The child prints its address; the tour learns it through a file.
            let child = try ChildLauncher("port-echo", [address, readyPath])
            var listening: String?
            let deadline = ContinuousClock.now + .seconds(10)
            while listening == nil && ContinuousClock.now < deadline {
                listening = readLine(readyPath)
                if listening == nil { TKThread.sleep(for: .milliseconds(2)) }
            }
            guard let listening, let remote = PortAddress.remote(listening) else { throw ScenarioFailure("the echo process did not start") }
            say.say("child process \(child.pid) listens on \(listening)")
            let replies = try TKSocketPort(tcpPort: 0)
            let delegate = Replies()
            replies.delegate = delegate
            TKRunLoop.current.add(replies, forMode: .default)
            let message = TKPortMessage(sendPort: remote, receivePort: replies, components: [.data(Array("print".utf8))])
            message.msgid = 1000
            try say.check(message.send(before: .now + .seconds(5)), "send failed: \(message.failureReason ?? "")")
            TKRunLoop.current.run(mode: .default, before: .now + .seconds(5))
            say.say("sent msgid 1000 with reply port \(replies.address) → answer msgid \(delegate.got.withLock { $0 })")
            let stop = TKPortMessage(sendPort: remote, receivePort: nil, components: [])
            stop.msgid = UInt32.max
            _ = stop.send(before: .now + .seconds(5))
            let status = child.wait()
            replies.invalidate()
            unlink(readyPath)
            try say.check(delegate.got.withLock { $0 } == [1001] && status == 0, "no answer from \(address)")
        }
        return "both transports carried the message and its reply port across processes"
    }

    private static func readLine(_ path: String) -> String? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = read(fd, &buffer, buffer.count)
        guard n > 0, let end = buffer[0..<n].firstIndex(of: 10) else { return nil }
        return String(decoding: buffer[0..<end], as: UTF8.self)
    }
}

// safety: `remaining` is touched only under `condition`.
/// A countdown the tour waits on (a TKCondition underneath).
final class Latch: @unchecked Sendable {
    private let condition = TKCondition()
    private var remaining: Int // guarded by condition

    init(count: Int) { remaining = count }

    func countDown() {
        condition.withLock {
            remaining -= 1
            if remaining == 0 { condition.broadcast() }
        }
    }

    func wait(until deadline: ContinuousClock.Instant) -> Bool {
        condition.withLock {
            while remaining > 0 { if !condition.wait(until: deadline) { return remaining == 0 } }
            return true
        }
    }
}
