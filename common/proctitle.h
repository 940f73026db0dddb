/* common/proctitle.h — the process's own command line, as /proc/PID/cmdline
 * shows it.
 *
 * The kernel's /proc/PID/cmdline reads the bytes between the mm's
 * arg_start and arg_end: the argv strings execve() placed on the stack.
 * A child of imgbuild that keeps running imgbuild's code (the sandbox's
 * pid 1) shows imgbuild's whole command line to every process that can
 * read /proc/1/cmdline, the build's steps included: host paths, the store,
 * build arguments, secret source paths (issue 38, hole 6).
 * PR_SET_MM_ARG_START would move the range but needs CAP_SYS_RESOURCE in
 * the initial user namespace; overwriting the range in place, as
 * setproctitle does, needs nothing.
 */
#ifndef IB_COMMON_PROCTITLE_H
#define IB_COMMON_PROCTITLE_H

/* Call first thing in main(), before anything reads argv: records the
 * range argv's strings occupy (argv[0] up to the NUL of argv[argc - 1]),
 * then points argv[i] and glibc's program_invocation_name and
 * program_invocation_short_name at heap copies (never freed), so that no
 * pointer into the range is left and ib_proctitle_set may overwrite it at
 * any time.  argv itself (the pointer array) is changed in place. */
void ib_proctitle_init (int argc, char **argv);

/* Overwrite the recorded range with `title` and NUL bytes: /proc/PID/cmdline
 * then reads `title` followed by NULs (as long as the old command line, so
 * its length alone stays visible).  `title` is cut to the range's length
 * less one.  Does nothing when ib_proctitle_init was not called (unit
 * tests, fuzzers).  Async-signal-safe: meant for a forked child. */
void ib_proctitle_set (const char *title);

#endif
