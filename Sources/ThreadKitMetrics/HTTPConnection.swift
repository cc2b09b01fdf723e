// HTTPConnection: one accepted connection of a TKMetricsHTTPEndpoint. Reads the request head, sends
// the response its owner chose (a shared HTTPResponse: a reference, never a copy), shuts its write
// side and waits for the client to close, then closes. Lifecycle (`phase`):
//   readingHead  until the blank line (or 16 KiB: 431); deadline = accepted + headerTimeout
//   sending      the response, as fast as the client takes it; deadline = started + sendTimeout
//   lingering    all handed to the kernel, FIN sent; until the client closes (same deadline), so
//                the kernel's copy of the tail is freed before the slot is, never left orphaned
//   closed
// A client past its deadline is closed by the owner's sweep: a sending or lingering one with a
// reset (SO_LINGER 0), which drops what the kernel still buffers for it at once.
//
// Threads: everything on the owner's loop thread (the streams' delegate calls, the owner's accept,
// sweep and stop).
import Glibc
import ThreadKit

/// What a connection asks of, and tells, the endpoint that accepted it. Loop thread only.
protocol HTTPConnectionOwner: AnyObject {
    /// The response to a request head (the bytes before the blank line); nil: the head was too big.
    func response(for head: [UInt8]?) -> HTTPResponse
    /// The connection started sending `response`.
    func connectionStartedSending(_ connection: HTTPConnection)
    /// The whole response is in the kernel's hands.
    func connectionFinishedSending(_ connection: HTTPConnection)
    /// The connection closed; it calls nothing after this.
    func connectionClosed(_ connection: HTTPConnection, _ ending: HTTPConnection.Ending)
}

/// One accepted connection: reads the request head, writes the response, closes. Loop thread only.
final class HTTPConnection: TKStreamDelegate, @unchecked Sendable {
    // safety: every member is touched on the endpoint's loop thread only (the streams' delegate
    // calls and the endpoint's accept, sweep and stop run there).
    static let maxHead = 16_384

    enum Phase {
        case readingHead, sending, lingering, closed
    }

    /// Why a connection closed.
    enum Ending {
        /// The response went out and the client closed (or failed) afterwards.
        case finished
        /// The client closed or failed before the response was out.
        case peerGone
        /// No complete request head within the header timeout.
        case headerTimeout
        /// The response not read within the send timeout: reset.
        case sendTimeout
        /// Closed while waiting for its head, to make room for a new connection at the cap.
        case evicted
        /// The endpoint stopped.
        case stopped
    }

    /// Accept order: the smallest is the oldest.
    let sequence: UInt64
    private(set) var phase = Phase.readingHead
    /// When the current phase must be over; the owner's sweep closes the connection then.
    private(set) var deadline: ContinuousClock.Instant
    /// The response being sent (nil before and after).
    private(set) var response: HTTPResponse?

    private let fd: Int32
    private let sendTimeout: Duration
    private let input: TKInputStream
    private let output: TKOutputStream
    private weak var owner: (any HTTPConnectionOwner)?
    private var request: [UInt8] = []
    /// Where the search for the blank line resumes, so a head trickled in byte by byte costs
    /// linear time.
    private var scanned = 0
    private var written = 0
    private var canWrite = false
    private var inputEnded = false

    init(
        fd: Int32, sequence: UInt64, loop: TKRunLoop, headerDeadline: ContinuousClock.Instant, sendTimeout: Duration,
        owner: any HTTPConnectionOwner
    ) {
        self.fd = fd
        self.sequence = sequence
        deadline = headerDeadline
        self.sendTimeout = sendTimeout
        self.owner = owner
        (input, output) = TKStream.getStreams(forConnectedSocket: fd)
        input.schedule(in: loop, forMode: .default)
        output.schedule(in: loop, forMode: .default)
    }

    func open() {
        input.delegate = self
        output.delegate = self
        input.open()
        output.open()
    }

    func stream(_ aStream: TKStream, handle eventCode: TKStream.Event) {
        guard phase != .closed else { return }
        switch eventCode {
        case .hasBytesAvailable:
            readAvailable()
        case .hasSpaceAvailable:
            canWrite = true
        case .endEncountered:
            inputEnded = true
            switch phase {
            case .readingHead: return close(.peerGone)
            case .lingering: return close(.finished)
            case .sending, .closed: break // a half-closed client still gets its answer
            }
        case .errorOccurred:
            return close(phase == .lingering ? .finished : .peerGone)
        default:
            break
        }
        flush()
    }

    /// At the owner's connection cap: takes in what the client has already sent, so that a
    /// connection whose request waits in the kernel is answered rather than taken for idle.
    func catchUp() {
        guard phase == .readingHead else { return }
        readAvailable()
        flush()
    }

    /// Reads what arrived: the head while reading it, and afterwards discards, so that the input
    /// stays armed and the client's close is seen. Reads only what is there (a read with nothing
    /// there would wait): an event queued before `catchUp` read its bytes finds none.
    private func readAvailable() {
        guard input.hasBytesAvailable else { return }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = input.read(&buffer, maxLength: buffer.count)
        guard n > 0, phase == .readingHead else { return } // 0 and -1: endEncountered / errorOccurred follow
        request += buffer[0..<n]
        if let end = headEnd() {
            start(owner?.response(for: Array(request[..<end])))
        } else if request.count > Self.maxHead {
            start(owner?.response(for: nil))
        }
    }

    /// The index of the blank line ending the head ("\r\n\r\n"), if it has arrived. Resumes where
    /// the last search stopped.
    private func headEnd() -> Int? {
        guard request.count >= 4 else { return nil }
        let last = request.count - 4
        var i = scanned
        while i <= last {
            if request[i] == 13 && request[i + 1] == 10 && request[i + 2] == 13 && request[i + 3] == 10 { return i }
            i += 1
        }
        scanned = last + 1
        return nil
    }

    private func start(_ response: HTTPResponse?) {
        guard let response else { return close(.stopped) }
        request = []
        self.response = response
        phase = .sending
        deadline = .now + sendTimeout
        owner?.connectionStartedSending(self)
    }

    private func flush() {
        guard phase == .sending, canWrite, let response else { return }
        let n = response.bytes.withUnsafeBufferPointer { output.write($0.baseAddress! + written, maxLength: $0.count - written) }
        canWrite = false
        if n < 0 { return close(.peerGone) }
        written += n
        if written == response.bytes.count { finishSending() }
    }

    /// All handed to the kernel: let go of the response, send FIN, wait for the client's close.
    private func finishSending() {
        response = nil
        phase = .lingering
        owner?.connectionFinishedSending(self) // counted before the client can see the end
        _ = shutdown(fd, Int32(SHUT_WR))
        if inputEnded { close(.finished) }
    }

    /// Closes both streams (and so the socket); after a send timeout with a reset, dropping what
    /// the kernel still holds for the client.
    func close(_ ending: Ending) {
        guard phase != .closed else { return }
        if ending == .sendTimeout {
            var reset = linger(l_onoff: 1, l_linger: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
        }
        phase = .closed
        response = nil
        request = []
        owner?.connectionClosed(self, ending) // counted before the client can see the close
        owner = nil
        input.delegate = nil
        output.delegate = nil
        input.close()
        output.close()
    }
}
