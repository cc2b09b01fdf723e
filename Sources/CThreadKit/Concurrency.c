// Concurrency.c: dlsym look-ups for docs/Concurrency.md. See include/CThreadKitConcurrency.h.
#define _GNU_SOURCE
#include "CThreadKitConcurrency.h"
#include <dlfcn.h>
#include <pthread.h>

typedef int (*tk_handle_fn)(void);
typedef void (*tk_callback_fn)(void *);

// Resolved once (pthread_once publishes them to every thread); NULL when absent.
static tk_handle_fn main_queue_handle_fn;
static tk_callback_fn main_queue_callback_fn;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void resolve(void) {
    main_queue_handle_fn = (tk_handle_fn)dlsym(RTLD_DEFAULT, "_dispatch_get_main_queue_handle_4CF");
    main_queue_callback_fn = (tk_callback_fn)dlsym(RTLD_DEFAULT, "_dispatch_main_queue_callback_4CF");
}

int tk_dispatch_main_queue_handle(void) {
    pthread_once(&resolve_once, resolve);
    if (main_queue_handle_fn == NULL || main_queue_callback_fn == NULL) return -1;
    return main_queue_handle_fn();
}

int tk_dispatch_main_queue_drain(void) {
    pthread_once(&resolve_once, resolve);
    if (main_queue_callback_fn == NULL) return -1;
    main_queue_callback_fn(NULL);
    return 0;
}

void *tk_swift_runtime_symbol(const char *name) {
    return dlsym(RTLD_DEFAULT, name);
}
