// SymbolicatedFrame: one frame of a report's call stack as the Symbolicator found it — function,
// image, offset, file:line, whether inlined — and whose code it is (docs/Diagnostics.md §7). An
// immutable value; any thread.
@_spi(Internal) import Runtime

struct SymbolicatedFrame: Sendable {
    /// Whose code a frame is, for finding the call site and folding ThreadKit's frames.
    enum Owner: Sendable { case threadKit, system, caller, unnamed }

    /// The captured return address (inlined frames share their caller's).
    let address: UInt
    /// The demangled function (Swift's short form: `TKLock.lock()`) and the symbol as in the binary
    /// (mangled), both empty when unknown; the image's file name (`threadkit`, `libc.so.6`).
    let function: String, rawName: String, image: String
    /// From the function's start, or from the image's base when the function is unknown.
    let offset: UInt
    /// `File.swift:12:5` where debug information has it.
    let location: String?
    /// A frame the compiler inlined into the next one (same address).
    let inlined: Bool
    let owner: Owner

    init(address: UInt, function: String, rawName: String, image: String, offset: UInt, location: String?, inlined: Bool) {
        (self.address, self.function, self.rawName, self.image) = (address, function, rawName, image)
        (self.offset, self.location, self.inlined) = (offset, location, inlined)
        owner = SymbolicatedFrame.owner(rawName: rawName, function: function, image: image)
    }

    /// From the Runtime's answer for one frame.
    init(address: UInt, _ frame: SymbolicatedBacktrace.Frame, images: ImageMap) {
        let symbol = frame.symbol
        let known = symbol.map { $0.rawName != "<unknown>" && !$0.rawName.isEmpty } ?? false
        var image = symbol?.imageName ?? ""
        var offset = UInt(clamping: symbol?.offset ?? 0)
        if let index = symbol?.imageIndex, index >= 0, index < images.count {
            let entry = images[index]
            if image.isEmpty { image = entry.name ?? "?" }
            if !known, let base = UInt64(entry.baseAddress).flatMap({ UInt(exactly: $0) }) { offset = address &- base }
        }
        let location = symbol?.sourceLocation.flatMap { place -> String? in
            guard place.line > 0, !place.path.hasPrefix("<") else { return nil }
            let file = place.path.split(separator: "/").last.map(String.init) ?? place.path
            return "\(file):\(place.line)"
        }
        self.init(
            address: address, function: known ? symbol!.name : "", rawName: known ? symbol!.rawName : "", image: image,
            offset: offset, location: location, inlined: frame.inlined)
    }

    /// `TKLock.lock() + 0x9a (TKLock.swift:48, threadkit)`; `threadkit +0x804c6` when unknown.
    var text: String {
        guard !function.isEmpty else { return "\(image) +0x\(String(offset, radix: 16))" }
        let place = inlined ? " [inlined]" : " + 0x\(String(offset, radix: 16))"
        return "\(function)\(place) (\(location.map { "\($0), " } ?? "")\(image))"
    }

    /// ThreadKit's own (its Swift module, its C functions), the system's (libc, the loader, the
    /// Swift runtime and standard library, Foundation and Dispatch), the caller's, or unknown.
    static func owner(rawName: String, function: String, image: String) -> Owner {
        if rawName.hasPrefix("$s9ThreadKit") || rawName.hasPrefix("$s10CThreadKit") || rawName.hasPrefix("tk_") {
            return .threadKit
        }
        if isSystemImage(image) || rawName.hasPrefix("$ss") || rawName.hasPrefix("$sS") || rawName.hasPrefix("swift_")
            || rawName.hasPrefix("_swift_") || rawName.hasPrefix("__")
        {
            return .system
        }
        return function.isEmpty ? .unnamed : .caller
    }

    /// libc, the dynamic loader, the Swift runtime and core libraries.
    private static func isSystemImage(_ file: String) -> Bool {
        let system = [
            "libc.", "libc-", "libpthread", "ld-linux", "linux-vdso", "libgcc_s", "libstdc++", "libm.", "libswift",
            "libFoundation", "libdispatch", "libBlocksRuntime",
        ]
        return system.contains { file.hasPrefix($0) }
    }
}
