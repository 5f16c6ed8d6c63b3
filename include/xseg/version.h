/*
 * The project's version, the one place it is written. Every program prints
 * it for --version; the Makefile reads XSEG_VERSION from here for the
 * pkg-config file. XSEG_VERSION_LAYOUT is the segment layout these programs
 * create and join: libxseg writes it into every segment header and refuses
 * a segment of another (src/xseg_internal.h takes it from here).
 *
 * XSEG_ABI_VERSION is libxseg.so's own version, MAJOR.MINOR.PATCH, apart
 * from the project's: the file is libxseg.so.MAJOR.MINOR.PATCH and its
 * SONAME libxseg.so.MAJOR. MAJOR goes up when a change to include/xseg/
 * or include/xtypes/ breaks a program linked before it (a function gone
 * or its arguments changed, a public struct changed; MINOR and PATCH back
 * to 0), MINOR when functions are added, PATCH for a fix inside. A new
 * segment layout alone does not change it.
 */
#ifndef XSEG_VERSION_H
#define XSEG_VERSION_H

#include <stdio.h>

#define XSEG_VERSION        "0.1.0"
#define XSEG_VERSION_LAYOUT 12
#define XSEG_ABI_VERSION    "1.2.0"

/* The --version line: "PROGRAM (xseg) 0.1.0, segment layout 12". */
static inline void xseg_print_version(const char *program)
{
	printf("%s (xseg) %s, segment layout %d\n", program, XSEG_VERSION,
	       XSEG_VERSION_LAYOUT);
}

#endif
