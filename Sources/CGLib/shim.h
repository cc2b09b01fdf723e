// CGLib: Debian's glib-2.0 (libglib2.0-dev, found through pkg-config) for ThreadKitGLib, plus the
// one thing Swift cannot say about GLib's C API itself: a GSource with room for its owner.
// ThreadKitGLib's GSourceFuncs callbacks are @convention(c) closures in Swift
// (Sources/ThreadKitGLib/TKGLibRunLoopSource.swift); only the owner slot's layout lives here, so
// that C lays the struct out (GSource's size differs between GLib versions and ABIs).
#ifndef CGLIB_SHIM_H
#define CGLIB_SHIM_H

#include <glib.h>
#include <glib-unix.h>

/// A GSource followed by a pointer to the Swift object that owns it (an Unmanaged reference).
typedef struct {
    GSource source;
    void *owner;
} TKGLibSourceWithOwner;

/// A new GSource (one reference, not attached) with `funcs` and `owner` in its slot.
static inline GSource *tk_glib_source_new(GSourceFuncs *funcs, void *owner) {
    GSource *source = g_source_new(funcs, sizeof(TKGLibSourceWithOwner));
    ((TKGLibSourceWithOwner *)source)->owner = owner;
    return source;
}

/// The owner stored by tk_glib_source_new.
static inline void *tk_glib_source_owner(GSource *source) {
    return ((TKGLibSourceWithOwner *)source)->owner;
}

#endif
