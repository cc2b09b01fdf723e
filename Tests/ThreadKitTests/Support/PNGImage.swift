// PNGImage: just enough of a PNG decoder to read back a browser's screenshot (8-bit RGB or RGBA,
// not interlaced): the IDAT stream inflated by the system's zlib (dlopen'd, so the test target
// needs no package or module for it) and the five row filters undone. Test support only.
import Foundation

struct PNGImage {
    let width: Int
    let height: Int
    /// Bytes per pixel: 3 (RGB) or 4 (RGBA).
    let channels: Int
    private let pixels: [UInt8]

    struct Failure: Error, CustomStringConvertible { let description: String }

    /// The pixel at (x, y) as (red, green, blue).
    func rgb(_ x: Int, _ y: Int) -> (UInt8, UInt8, UInt8) {
        let i = (y * width + x) * channels
        return (pixels[i], pixels[i + 1], pixels[i + 2])
    }

    init(_ data: Data) throws {
        let bytes = [UInt8](data)
        guard bytes.count > 33, bytes.prefix(8).elementsEqual([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) else {
            throw Failure(description: "not a PNG")
        }
        func u32(_ at: Int) -> Int { bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) } }
        var offset = 8
        var compressed: [UInt8] = []
        var header: (width: Int, height: Int, depth: UInt8, color: UInt8, interlace: UInt8)?
        while offset + 8 <= bytes.count {
            let length = u32(offset)
            let type = String(decoding: bytes[offset + 4..<offset + 8], as: UTF8.self)
            let body = offset + 8
            guard body + length <= bytes.count else { throw Failure(description: "truncated \(type) chunk") }
            if type == "IHDR" { header = (u32(body), u32(body + 4), bytes[body + 8], bytes[body + 9], bytes[body + 12]) }
            if type == "IDAT" { compressed += bytes[body..<body + length] }
            offset = body + length + 4
        }
        guard let header, header.depth == 8, header.color == 2 || header.color == 6, header.interlace == 0 else {
            throw Failure(description: "unsupported PNG (need 8-bit RGB/RGBA, not interlaced): \(String(describing: header))")
        }
        width = header.width
        height = header.height
        channels = header.color == 2 ? 3 : 4
        let stride = width * channels
        var raw = [UInt8](repeating: 0, count: height * (stride + 1))
        try PNGImage.inflate(compressed, into: &raw)
        var out = [UInt8](repeating: 0, count: height * stride)
        for y in 0..<height {
            let filter = raw[y * (stride + 1)]
            for x in 0..<stride {
                let value = raw[y * (stride + 1) + 1 + x]
                let a = x >= channels ? Int(out[y * stride + x - channels]) : 0
                let b = y > 0 ? Int(out[(y - 1) * stride + x]) : 0
                let c = x >= channels && y > 0 ? Int(out[(y - 1) * stride + x - channels]) : 0
                let predictor: Int
                switch filter {
                case 0: predictor = 0
                case 1: predictor = a
                case 2: predictor = b
                case 3: predictor = (a + b) / 2
                case 4:
                    let p = a + b - c
                    let pa = abs(p - a)
                    let pb = abs(p - b)
                    let pc = abs(p - c)
                    predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c
                default: throw Failure(description: "bad filter \(filter) on row \(y)")
                }
                out[y * stride + x] = UInt8(truncatingIfNeeded: Int(value) + predictor)
            }
        }
        pixels = out
    }

    private typealias Uncompress =
        @convention(c) (UnsafeMutablePointer<UInt8>, UnsafeMutablePointer<UInt>, UnsafePointer<UInt8>, UInt) -> Int32

    private static func inflate(_ source: [UInt8], into destination: inout [UInt8]) throws {
        guard let library = dlopen("libz.so.1", RTLD_NOW), let symbol = dlsym(library, "uncompress") else {
            throw Failure(description: "zlib (libz.so.1) not found")
        }
        let uncompress = unsafeBitCast(symbol, to: Uncompress.self)
        var length = UInt(destination.count)
        let status = destination.withUnsafeMutableBufferPointer { out in
            source.withUnsafeBufferPointer { uncompress(out.baseAddress!, &length, $0.baseAddress!, UInt($0.count)) }
        }
        guard status == 0, length == UInt(destination.count) else {
            throw Failure(description: "zlib uncompress failed (\(status)) or short (\(length) of \(destination.count) bytes)")
        }
    }
}
