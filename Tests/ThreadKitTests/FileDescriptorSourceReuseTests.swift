// FileDescriptorSourceReuseTests: a TKFileDescriptorSource whose descriptor was closed under it
// (not invalidated first) and whose number another object on the same loop then watched: the
// old source must never touch the new owner's registration (docs/RunLoopIO.md, "Failure
// table"). The number is reused deterministically with dup2 onto it; the new owner is judged by
// bytes written with plain POSIX calls arriving as its callback or stream event.
import Foundation
import Glibc
import Testing
import ThreadKit
import XCTest

final class FileDescriptorSourceReuseTests: XCTestCase {
    /// Puts the read end of a fresh pipe on descriptor number `number` (closed by the caller
    /// before); returns the pipe's write end.
    private func pipeReusing(_ number: Int32) -> Int32 {
        let (r, w) = IOTestFD.pipe()
        move(r, to: number)
        return w
    }

    /// Renumbers `fd` as `number` (free: the kernel may have handed out `number` itself).
    private func move(_ fd: Int32, to number: Int32) {
        guard fd != number else { return }
        XCTAssertEqual(dup2(fd, number), number)
        close(fd)
    }

    /// An old source armed on `number`, whose descriptor is then closed under it.
    private func staleSource(on worker: IOLoopThread, calls: Recorder<TKFileDescriptorSource.CallBackTypes>)
        -> (source: TKFileDescriptorSource, number: Int32, oldWriter: Int32)
    {
        let (r, w) = IOTestFD.pipe()
        let source = TKFileDescriptorSource(fileDescriptor: r) { _, types in calls.append(types) }
        worker.loop.add(source, forMode: .default)
        source.enableCallBacks(.read)
        worker.sync {}
        close(r) // under the source: the misuse that leaves its registration stale
        return (source, r, w)
    }

    func testInvalidatingAStaleSourceLeavesTheNewOwnersRegistration() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let oldCalls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let (old, number, oldWriter) = staleSource(on: worker, calls: oldCalls)
        defer { close(oldWriter) }
        let writer = pipeReusing(number)
        defer { close(writer) }
        let newCalls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let new = TKFileDescriptorSource(fileDescriptor: number, closeOnInvalidate: true) { _, types in newCalls.append(types) }
        worker.loop.add(new, forMode: .default)
        new.enableCallBacks(.read)
        worker.sync {}
        old.invalidate() // must not remove `new`'s registration of the same number
        XCTAssertTrue(ProcessProbe.isOpen(number), "invalidating the old source closed nothing")
        IOTestFD.writeByte(writer)
        XCTAssertTrue(newCalls.wait { $0 == [.read] }, "the new source never heard its byte: \(newCalls.values)")
        XCTAssertEqual(oldCalls.count, 0)
        new.invalidate()
    }

    func testAStreamOnAReusedNumberHearsItsBytesAfterTheStaleSourceIsInvalidated() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let oldCalls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let (old, number, oldWriter) = staleSource(on: worker, calls: oldCalls)
        defer { close(oldWriter) }
        let (mine, peer) = IOTestFD.socketPair()
        defer { close(peer) }
        move(mine, to: number)
        let events = Recorder<TKStream.Event>()
        let delegate = RecordingStreamDelegate(events)
        let (input, output) = TKStream.getStreams(forConnectedSocket: number)
        worker.sync {
            input.delegate = delegate
            input.schedule(in: worker.loop, forMode: .default)
            input.open()
        }
        XCTAssertTrue(events.wait { $0.contains(.openCompleted) })
        old.invalidate() // must not remove the stream's registration of the same number
        IOTestFD.writeByte(peer)
        XCTAssertTrue(events.wait { $0.contains(.hasBytesAvailable) }, "the stream never heard its byte: \(events.values)")
        XCTAssertEqual(oldCalls.count, 0)
        worker.sync {
            input.close()
            output.close()
        }
    }

    func testAnOrphanedRegistrationOfADupedDescriptorNeverCallsTheOldSource() {
        let worker = IOLoopThread()
        defer { worker.stop() }
        let oldCalls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let (r, oldWriter) = IOTestFD.pipe()
        defer { close(oldWriter) }
        let old = TKFileDescriptorSource(fileDescriptor: r) { _, types in oldCalls.append(types) }
        worker.loop.add(old, forMode: .default)
        old.enableCallBacks(.read)
        worker.sync {}
        // A second reference to the old pipe keeps its epoll entry alive after `r` closes: the
        // kernel drops an entry only when the last reference to the open file goes.
        let keeper = dup(r)
        XCTAssertGreaterThanOrEqual(keeper, 0)
        defer { close(keeper) }
        close(r)
        let writer = pipeReusing(r)
        defer { close(writer) }
        let newCalls = Recorder<TKFileDescriptorSource.CallBackTypes>()
        let new = TKFileDescriptorSource(fileDescriptor: r, closeOnInvalidate: true) { _, types in newCalls.append(types) }
        worker.loop.add(new, forMode: .default)
        new.enableCallBacks(.read)
        // The old pipe becomes readable: its orphaned entry reports with the old token. The old
        // source must not be called (its callback would read the new owner's descriptor).
        IOTestFD.writeByte(oldWriter)
        IOTestFD.writeByte(writer)
        XCTAssertTrue(newCalls.wait { $0 == [.read] })
        for _ in 0..<5 { worker.sync {} }
        XCTAssertEqual(oldCalls.count, 0, "the old source heard the orphaned entry: \(oldCalls.values)")
        old.invalidate()
        new.invalidate()
    }
}

/// The stale-source misuse, an exit test (Support/MisuseAssertions.swift).
@Suite struct FileDescriptorSourceReuseExitTests {
    @Test func reenablingAStaleSourceIsAMisuseAndTakesNothing() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            reenableAStaleSource()
        }
        expectMisuse(
            result,
            mentions: [
                "TKFileDescriptorSource(fileDescriptor: ", ").enableCallBacks",
                "was closed while the source was still valid", "now belongs to another object on the run loop of",
                "Fix: invalidate the source before closing its descriptor",
            ])
    }
}

/// The stale-source misuse (docs/RunLoopIO.md, "Failure table"): an old source armed on a
/// descriptor that is then closed under it; a new pipe put on the same number and watched by a
/// new source on the same loop; then the old source re-enabled, which would take the new source's
/// events. All on this thread's loop. Without the check it returns, saying on standard error
/// which source heard the new pipe's byte.
private func reenableAStaleSource() {
    let loop = TKRunLoop.current
    let heard = HeardBy()
    // A high number: the descriptors this process's other threads open meanwhile take the lowest
    // free numbers, so only dup2 reuses this one.
    let number: Int32 = 202
    var fds: [Int32] = [0, 0]
    precondition(pipe(&fds) == 0 && dup2(fds[0], number) == number, "pipe failed")
    close(fds[0])
    let old = TKFileDescriptorSource(fileDescriptor: number) { _, _ in heard.source = 1 }
    loop.add(old, forMode: .default)
    old.enableCallBacks(.read)
    close(number) // under the source
    var second: [Int32] = [0, 0]
    precondition(pipe(&second) == 0 && dup2(second[0], number) == number, "pipe failed")
    close(second[0])
    let new = TKFileDescriptorSource(fileDescriptor: number) { _, _ in heard.source = 2 }
    loop.add(new, forMode: .default)
    new.enableCallBacks(.read)
    old.enableCallBacks(.read) // the misuse
    var byte: UInt8 = 7
    _ = write(second[1], &byte, 1)
    let deadline = ContinuousClock.now + .seconds(10)
    while heard.source == 0 && ContinuousClock.now < deadline {
        loop.run(mode: .default, before: deadline)
    }
    print(["nobody", "the old source", "the new source"][heard.source] + " heard the byte")
    withExtendedLifetime((old, new)) {}
}

/// Which source heard the byte: 1 the old one, 2 the new one.
private final class HeardBy: @unchecked Sendable {
    // safety: written by the sources' callbacks, which run on the loop of the thread that reads
    // it, within its own run calls.
    var source = 0
}

/// Records every event a stream reports.
final class RecordingStreamDelegate: TKStreamDelegate, @unchecked Sendable {
    private let events: Recorder<TKStream.Event>
    init(_ events: Recorder<TKStream.Event>) { self.events = events }
    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) { events.append(eventCode) }
}
