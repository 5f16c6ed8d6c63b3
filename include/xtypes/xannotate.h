/*
 * xannotate.h - happens-before annotations for ThreadSanitizer.
 *
 * liburcu synchronises through inline assembly and through code that is not
 * built with -fsanitize=thread, so TSan cannot see some orderings that do
 * hold, chiefly an RCU grace period: "every reader that could see this node
 * has left its read-side section".  These two calls describe such an edge;
 * they compile to nothing unless the translation unit is built with TSan.
 *
 *   xannotate_happens_before(addr)   everything this thread did so far ...
 *   xannotate_happens_after(addr)    ... happens before what this thread
 *                                    does next (same addr, later in time).
 *
 * Use them only to model a real synchronisation that TSan cannot observe,
 * never to silence a report.
 */
#ifndef XTYPES_XANNOTATE_H
#define XTYPES_XANNOTATE_H

#if defined(__SANITIZE_THREAD__)
#define XANNOTATE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XANNOTATE_TSAN 1
#endif
#endif

#ifdef XANNOTATE_TSAN
#include <sanitizer/tsan_interface.h>
static inline void xannotate_happens_before(void *addr) { __tsan_release(addr); }
static inline void xannotate_happens_after(void *addr) { __tsan_acquire(addr); }
#else
static inline void xannotate_happens_before(void *addr) { (void)addr; }
static inline void xannotate_happens_after(void *addr) { (void)addr; }
#endif

#endif /* XTYPES_XANNOTATE_H */
