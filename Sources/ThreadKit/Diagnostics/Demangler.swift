// Demangler: Swift symbol names made readable, for frames named by dladdr (Symbolicator's
// fallback). Stateless apart from the runtime's demangler, looked up once; any thread.
import Glibc

enum Demangler {
    /// swift_demangle from the Swift runtime, found once with dlsym (it is not in a public header).
    private typealias Function =
        @convention(c) (
            UnsafePointer<CChar>?, Int, UnsafeMutablePointer<CChar>?,
            UnsafeMutablePointer<Int>?, UInt32
        ) -> UnsafeMutablePointer<CChar>?
    private static let function: Function? = {
        // safety: dlsym's result is swift_demangle, whose C signature is the one above.
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "swift_demangle") else { return nil }
        return unsafeBitCast(symbol, to: Function.self)
    }()

    /// The demangled name, or nil when `mangled` is not a Swift symbol.
    static func demangle(_ mangled: String) -> String? {
        guard mangled.hasPrefix("$s") || mangled.hasPrefix("_T") || mangled.hasPrefix("$S"), let function else { return nil }
        return mangled.withCString { cString -> String? in
            guard let result = function(cString, strlen(cString), nil, nil, 0) else { return nil }
            defer { free(result) }
            return String(cString: result)
        }
    }
}
