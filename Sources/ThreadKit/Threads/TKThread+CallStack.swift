// TKThread+CallStack: the calling thread's return addresses and their symbols (NSThread's
// callStackReturnAddresses / callStackSymbols). Stateless apart from the demangler looked up
// once; any thread.
import CThreadKit
import Glibc

extension TKThread {
    /// The return addresses on the calling thread's stack, innermost first.
    public static var callStackReturnAddresses: [UInt] {
        captureStack().map { UInt(bitPattern: $0) }
    }

    /// One line per frame, innermost first: index, image, address and symbol, with Swift symbols
    /// demangled where the runtime's demangler is available and the symbol is exported.
    public static var callStackSymbols: [String] {
        var frames = captureStack()
        let count = Int32(frames.count)
        guard let symbols = frames.withUnsafeMutableBufferPointer({ tk_backtrace_symbols($0.baseAddress, count) }) else {
            return frames.enumerated().map { "\($0.offset) 0x\(String(UInt(bitPattern: $0.element), radix: 16))" }
        }
        defer { free(symbols) }
        return (0..<frames.count).map { i in
            let raw = symbols[i].map { String(cString: $0) } ?? "?"
            return "\(i) \(CallStackSymbol(raw).readable)"
        }
    }

    /// Frames of the caller of the public property (this helper and the accessor are dropped).
    private static func captureStack() -> [UnsafeMutableRawPointer?] {
        var buffer = [UnsafeMutableRawPointer?](repeating: nil, count: 256)
        let n = buffer.withUnsafeMutableBufferPointer { tk_backtrace($0.baseAddress, 256) }
        return Array(buffer[min(2, Int(n))..<Int(n)])
    }
}

/// A backtrace_symbols line, "image(symbol+0xoffset) [0xaddress]", with the symbol demangled.
struct CallStackSymbol {
    let readable: String

    init(_ line: String) {
        guard let open = line.firstIndex(of: "("), let plus = line[open...].firstIndex(of: "+"),
            line.index(after: open) < plus
        else {
            readable = line
            return
        }
        let mangled = String(line[line.index(after: open)..<plus])
        let image = line[..<open].split(separator: "/").last.map(String.init) ?? ""
        readable = "\(image) \(CallStackSymbol.demangle(mangled) ?? mangled)\(line[plus...].prefix { $0 != ")" })"
    }

    /// swift_demangle from the Swift runtime, found once with dlsym (it is not in a public header).
    private typealias Demangler =
        @convention(c) (
            UnsafePointer<CChar>?, Int, UnsafeMutablePointer<CChar>?,
            UnsafeMutablePointer<Int>?, UInt32
        ) -> UnsafeMutablePointer<CChar>?
    private static let demangler: Demangler? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "swift_demangle") else { return nil }
        return unsafeBitCast(symbol, to: Demangler.self)
    }()

    static func demangle(_ mangled: String) -> String? {
        guard mangled.hasPrefix("$s") || mangled.hasPrefix("_T") || mangled.hasPrefix("$S"), let demangler else { return nil }
        return mangled.withCString { cString -> String? in
            guard let result = demangler(cString, strlen(cString), nil, nil, 0) else { return nil }
            defer { free(result) }
            return String(cString: result)
        }
    }
}
