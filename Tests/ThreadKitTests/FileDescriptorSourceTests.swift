// FileDescriptorSourceTests: TKFileDescriptorSource (CFFileDescriptor) on run loops: callbacks on
// the loop's thread in the added modes, one shot per enable, closed descriptors reported once,
// invalidation, retention by the loop, no descriptor leaks, no CPU while idle.
// Judged with pipes/socketpairs written by the test and pthread-mutex recorders.
import Foundation
import Glibc
import ThreadKit
import XCTest

final class FileDescriptorSourceTests: XCTestCase {
    func testReadCallbackRunsOnTheLoopThread() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (r, w) = IOTestFD.pipe()
        defer { close(w) }
        let calls = Recorder<(TKFileDescriptorSource.CallBackTypes, Bool)>()
        let source = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { _, types in
            calls.append((types, worker.isCurrent))
        }
        worker.loop.add(source, forMode: .default)
        source.enableCallBacks(.read)
        IOTestFD.writeByte(w)
        XCTAssertTrue(calls.wait { $0.count == 1 })
        XCTAssertEqual(calls.values[0].0, .read)
        XCTAssertTrue(calls.values[0].1, "the callback must run on the loop's thread")
        source.invalidate()
        XCTAssertFalse(ProcessProbe.isOpen(r), "closeOnInvalidate closes the descriptor")
    }

    func testCallbacksAreOneShotUntilEnabledAgain() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (r, w) = IOTestFD.pipe()
        defer { close(w) }
        let calls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let source = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { _, types in calls.append(types) }
        defer { source.invalidate() }
        worker.loop.add(source, forMode: .default)
        source.enableCallBacks(.read)
        IOTestFD.writeByte(w)
        XCTAssertTrue(calls.wait { $0.count == 1 })
        // Still readable (nothing read), but not enabled: several passes go by without a callback.
        for _ in 0..<5 { worker.sync {} }
        XCTAssertEqual(calls.count, 1)
        source.enableCallBacks(.read)
        XCTAssertTrue(calls.wait { $0.count == 2 }, "re-enabling reports the still-ready descriptor")
        for _ in 0..<5 { worker.sync {} }
        XCTAssertEqual(calls.count, 2)
    }

    func testCallbackMayReenableItself() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (r, w) = IOTestFD.pipe()
        defer { close(w) }
        let bytes = JudgedCounter()
        let source = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { source, types in
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = read(source.fileDescriptor, &buffer, 64)
            if n > 0 { bytes.add(n) }
            source.enableCallBacks(.read)
        }
        defer { source.invalidate() }
        worker.loop.add(source, forMode: .default)
        source.enableCallBacks(.read)
        let total = stress(2_000)
        for _ in 0..<total { IOTestFD.writeByte(w) }
        XCTAssertTrue(waitUntil(.now + .seconds(20)) { bytes.count == total })
    }

    func testOnlyInTheModesItWasAddedTo() {
        let (r, w) = IOTestFD.pipe()
        defer { close(w) }
        let done = Workers.start {
            let loop = TKRunLoop.current
            let calls = Recorder<TKFileDescriptorSource.CallBackTypes>()
            let source = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { _, types in calls.append(types) }
            let io = TKRunLoop.Mode("io")
            loop.add(source, forMode: io)
            source.enableCallBacks(.read)
            IOTestFD.writeByte(w)
            let timer = TKTimer(interval: .seconds(100), repeats: false) { _ in }
            loop.add(timer, forMode: .default)
            _ = loop.run(mode: .default, for: .milliseconds(50), returnAfterSourceHandled: true)
            XCTAssertEqual(calls.count, 0, "not called while the loop runs a mode without the source")
            XCTAssertEqual(loop.run(mode: io, for: .seconds(10), returnAfterSourceHandled: true), .handledSource)
            XCTAssertEqual(calls.values, [.read])
            timer.invalidate()
            source.invalidate()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }

    func testCommonModesAndWriteReadiness() {
        let (a, b) = IOTestFD.socketPair()
        defer { close(b) }
        let done = Workers.start {
            let loop = TKRunLoop.current
            let calls = Recorder<TKFileDescriptorSource.CallBackTypes>()
            let source = TKFileDescriptorSource(fileDescriptor: a, closeOnInvalidate: true) { _, types in calls.append(types) }
            loop.add(source, forMode: .common)
            source.enableCallBacks([.read, .write])
            XCTAssertEqual(loop.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: true), .handledSource)
            XCTAssertEqual(calls.values, [.write], "an empty socket is writable, not readable")
            IOTestFD.writeByte(b)
            XCTAssertEqual(loop.run(mode: .default, for: .seconds(10), returnAfterSourceHandled: true), .handledSource)
            XCTAssertEqual(calls.values, [.write, .read], "read stays enabled after write fired")
            source.invalidate()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 30), .success)
    }

    func testPeerHangUpReportsEnabledTypes() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (a, b) = IOTestFD.socketPair()
        let calls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let source = TKFileDescriptorSource(fileDescriptor: a, closeOnInvalidate: true) { source, types in
            calls.append(types)
            var byte: UInt8 = 0
            calls.append(read(source.fileDescriptor, &byte, 1) == 0 ? [] : .write) // [] marks EOF seen
        }
        defer { source.invalidate() }
        worker.loop.add(source, forMode: .default)
        source.enableCallBacks(.read)
        close(b)
        XCTAssertTrue(calls.wait { $0.count == 2 })
        XCTAssertEqual(calls.values, [.read, []], "a hang-up is reported as readable, and read returns the end")
    }

    func testDescriptorClosedUnderTheSourceIsReportedOnce() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (r, w) = IOTestFD.pipe()
        defer { close(w) }
        let calls = Recorder<(TKFileDescriptorSource.CallBackTypes, Bool)>()
        let source = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { source, types in
            calls.append((types, source.isValid))
        }
        worker.loop.add(source, forMode: .default)
        source.enableCallBacks(.read)
        worker.sync {}
        close(r) // under the source
        let cpuBefore = ProcessProbe.cpuTime
        source.enableCallBacks(.read)
        XCTAssertTrue(calls.wait { $0.count == 1 })
        XCTAssertEqual(calls.values[0].0, [.read, .write])
        XCTAssertFalse(calls.values[0].1, "the source is invalid when the lost descriptor is reported")
        XCTAssertFalse(source.isValid)
        source.enableCallBacks(.read) // no effect on an invalid source
        for _ in 0..<5 { worker.sync {} }
        XCTAssertEqual(calls.count, 1, "reported once")
        XCTAssertLessThan(ProcessProbe.cpuTime - cpuBefore, .milliseconds(500))
    }

    func testClosedBeforeSchedulingIsReportedWhenAdded() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (r, w) = IOTestFD.pipe()
        close(r)
        close(w)
        let calls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let source = TKFileDescriptorSource(fileDescriptor: r) { _, types in calls.append(types) }
        source.enableCallBacks(.write)
        worker.loop.add(source, forMode: .default)
        XCTAssertTrue(calls.wait { $0 == [[.read, .write]] })
        XCTAssertFalse(source.isValid)
    }

    func testInvalidateClosesOnlyWhenAsked() {
        let (r, w) = IOTestFD.pipe()
        let keep = TKFileDescriptorSource(fileDescriptor: r) { _, _ in }
        keep.invalidate()
        XCTAssertTrue(ProcessProbe.isOpen(r))
        XCTAssertFalse(keep.isValid)
        let closing = TKFileDescriptorSource(fileDescriptor: w, closeOnInvalidate: true) { _, _ in }
        closing.invalidate()
        XCTAssertFalse(ProcessProbe.isOpen(w))
        close(r)
    }

    func testRemovedSourceIsNotCalled() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (r, w) = IOTestFD.pipe()
        defer {
            close(w)
            close(r)
        }
        let calls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let source = TKFileDescriptorSource(fileDescriptor: r) { _, types in calls.append(types) }
        worker.loop.add(source, forMode: .default)
        worker.loop.remove(source, forMode: .default)
        source.enableCallBacks(.read)
        IOTestFD.writeByte(w)
        for _ in 0..<5 { worker.sync {} }
        XCTAssertEqual(calls.count, 0)
        worker.loop.add(source, forMode: .default)
        XCTAssertTrue(calls.wait { $0 == [.read] }, "added again, the enabled type is reported")
        source.invalidate()
    }

    func testRegularFileIsAlwaysReady() throws {
        let path = NSTemporaryDirectory() + "tk-fdsource-\(getpid())"
        _ = FileManager.default.createFile(atPath: path, contents: Data([1, 2, 3]))
        defer { unlink(path) }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let worker = IOLoopThread()
        defer { worker.stop() }
        let calls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let source = TKFileDescriptorSource(fileDescriptor: fd, closeOnInvalidate: true) { _, types in calls.append(types) }
        worker.loop.add(source, forMode: .default)
        source.enableCallBacks([.read, .write])
        XCTAssertTrue(calls.wait { $0 == [[.read, .write]] })
        source.enableCallBacks(.read)
        XCTAssertTrue(calls.wait { $0.count == 2 })
        XCTAssertEqual(calls.values[1], .read)
        source.invalidate()
        XCTAssertFalse(ProcessProbe.isOpen(fd))
    }

    func testTheLoopKeepsAnAddedSourceAlive() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let (r, w) = IOTestFD.pipe()
        defer { close(w) }
        let calls = JudgedCounter()
        do {
            let source = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { source, _ in
                calls.add()
                source.invalidate()
            }
            worker.loop.add(source, forMode: .default)
            source.enableCallBacks(.read)
        }
        IOTestFD.writeByte(w)
        XCTAssertTrue(waitUntil(.now + .seconds(20)) { calls.count == 1 })
        XCTAssertTrue(waitUntil(.now + .seconds(10)) { !ProcessProbe.isOpen(r) }, "invalidated: closed")
    }

    func testNoDescriptorLeakAndNoCPUWhileIdle() {
        let worker = IOLoopThread()
        let baseline = ProcessProbe.openDescriptors
        for _ in 0..<stress(500) {
            let (r, w) = IOTestFD.pipe()
            let source = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { _, _ in }
            worker.loop.add(source, forMode: .default)
            source.enableCallBacks([.read, .write])
            source.invalidate()
            close(w)
        }
        // A source left armed on an idle pipe, and one on a hung-up socket (disabled after one report).
        let (r, w) = IOTestFD.pipe()
        let idle = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { _, _ in }
        worker.loop.add(idle, forMode: .default)
        idle.enableCallBacks(.read)
        let (a, b) = IOTestFD.socketPair()
        close(b)
        let hungUp = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let dead = TKFileDescriptorSource(fileDescriptor: a, closeOnInvalidate: true) { _, types in hungUp.append(types) }
        worker.loop.add(dead, forMode: .default)
        dead.enableCallBacks([.read, .write])
        XCTAssertTrue(hungUp.wait { $0.count == 1 })
        worker.sync {}
        let cpuBefore = ProcessProbe.cpuTime
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .milliseconds(300) { usleep(20_000) }
        let used = ProcessProbe.cpuTime - cpuBefore
        XCTAssertLessThan(used, .milliseconds(60), "an idle loop with armed and hung-up sources must not spin")
        XCTAssertEqual(hungUp.count, 1)
        idle.invalidate()
        dead.invalidate()
        close(w)
        worker.stop()
        XCTAssertLessThanOrEqual(ProcessProbe.descriptors(settlingAtMost: baseline), baseline)
    }
}
