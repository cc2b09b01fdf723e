// GLibCallbacks: Swift closures as GLib callbacks for the GLib tour (threadkit-glib) and the GLib
// test roles (ThreadKitGLibTestChild): timeouts, idles, descriptor watches on a given context.
// Each closure is boxed and retained by GLib until the source's destroy notify. The closures run
// on the thread iterating the context. Built only with the GLib trait (Package.swift).
#if GLib
    import CGLib

    // safety: immutable after init; GLib calls `body` only on the thread iterating its context.
    /// A closure behind a GLib callback. Touched only by the thread iterating its context.
    package final class GLibCallback: @unchecked Sendable {
        let body: (GIOCondition) -> Bool
        init(_ body: @escaping (GIOCondition) -> Bool) { self.body = body }
    }

    package enum GLibCall {
        /// GSourceFunc: runs the box's closure; false removes the source.
        static var sourceFunc: GSourceFunc {
            { data in
                // safety: `data` is the box `attach` retained for GLib, released by `destroy`.
                Unmanaged<GLibCallback>.fromOpaque(data!).takeUnretainedValue().body(GIOCondition(0)) ? 1 : 0
            }
        }
        /// GUnixFDSourceFunc: the same with the condition GLib reported.
        static var descriptorFunc: GUnixFDSourceFunc {
            { _, condition, data in
                // safety: as `sourceFunc`.
                Unmanaged<GLibCallback>.fromOpaque(data!).takeUnretainedValue().body(condition) ? 1 : 0
            }
        }
        static var destroy: GDestroyNotify {
            { data in
                // safety: the retain `attach` took; GLib calls the notify once.
                Unmanaged<GLibCallback>.fromOpaque(data!).release()
            }
        }

        /// `body` every `ms` milliseconds on `context` (nil: the default one) until it returns false.
        package static func timeout(_ ms: UInt32, on context: OpaquePointer? = nil, _ body: @escaping () -> Bool) {
            attach(g_timeout_source_new(ms), sourceFunc, context) { _ in body() }
        }

        /// `body` whenever `context` is idle, until it returns false.
        package static func idle(on context: OpaquePointer? = nil, _ body: @escaping () -> Bool) {
            attach(g_idle_source_new(), sourceFunc, context) { _ in body() }
        }

        /// `body` whenever `fd` shows `condition`, until it returns false.
        package static func watch(
            _ fd: Int32, _ condition: GIOCondition, on context: OpaquePointer? = nil,
            _ body: @escaping (GIOCondition) -> Bool
        ) {
            // A GUnixFDSourceFunc stored where GLib keeps a GSourceFunc, as g_unix_fd_add does.
            attach(g_unix_fd_source_new(fd, condition), unsafeBitCast(descriptorFunc, to: GSourceFunc.self), context, body)
        }

        private static func attach(
            _ source: UnsafeMutablePointer<GSource>?, _ function: GSourceFunc, _ context: OpaquePointer?,
            _ body: @escaping (GIOCondition) -> Bool
        ) {
            let box = Unmanaged.passRetained(GLibCallback(body)).toOpaque()
            g_source_set_callback(source, function, box, destroy)
            g_source_attach(source, context)
            g_source_unref(source)
        }
    }
#endif
