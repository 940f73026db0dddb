/* common/lazylib.h — shared libraries loaded on first use.
 *
 * libcurl, libarchive, libcrypto, libxml2, libyaml and libelf (with their
 * own dependencies: 40 shared objects) cost a process about 8 ms of
 * mapping and relocation when they are linked in, before main() runs.
 * Most commands need one or two of them, and a cached build or
 * `imgbuild version` needs none.  So bin/imgbuild does not link them:
 * each function imgbuild calls is a stub (the lazy_*.c files next to the
 * code that uses the library, one per library) that dlopen()s the
 * library by its soname the first time one of its functions is called,
 * looks the function up once and calls it; later calls go through the
 * cached pointer.  Callers include the library's own header and call its
 * functions as usual.
 *
 * A library that cannot be loaded (not installed) ends the process with
 * a message naming it and exit status 127, as the dynamic loader would
 * have at start.  After ib_lazylib_seal() (the sandbox, before it enters
 * the rootfs: a library is never looked up in an image's files) a library
 * not loaded yet ends the process the same way. */
#ifndef IB_COMMON_LAZYLIB_H
#define IB_COMMON_LAZYLIB_H

#include <stdbool.h>
#include <stddef.h>

/* A library's descriptor, in its stub file: the soname must not be empty
 * (dlopen of "" is the program itself). */
#define IB_LAZYLIB(var, so, why)                                                  \
  _Static_assert (sizeof (so) > 1, "no soname for " #var ": see the Makefile");   \
  static ib_lazylib_t var = { .soname = (so), .what = (why) }

typedef struct ib_lazylib
{
  const char *soname; /* e.g. "libcurl.so.4" (the Makefile passes the build's) */
  const char *what;   /* what it is needed for, for the message */
  void *handle;       /* dlopen's, once loaded (written under the module's lock) */
} ib_lazylib_t;

/* The address of function `name` of `lib`, loading the library first if
 * this process has not.  Thread-safe.  Never NULL: a library or a symbol
 * that is missing ends the process (above). */
void *ib_lazylib_sym (ib_lazylib_t *lib, const char *name);

/* Whether `lib` has been loaded by this process (tests, benchmarks). */
bool ib_lazylib_loaded (const ib_lazylib_t *lib);

/* From now on, in this process, load no library: called by the sandbox's
 * child before it pivots into a rootfs. */
void ib_lazylib_seal (void);

/* The function `name` of `lib`, looked up on its first use (an
 * expression of the function's pointer type). */
#define IB_LAZY_FN(lib, name)                                                     \
  __extension__ ({                                                                \
    static __typeof__ (name) *fn_;                                                \
    __typeof__ (name) *f_ = __atomic_load_n (&fn_, __ATOMIC_ACQUIRE);             \
    if (f_ == NULL)                                                               \
      {                                                                           \
        f_ = (__typeof__ (name) *) ib_lazylib_sym (&(lib), #name);                \
        __atomic_store_n (&fn_, f_, __ATOMIC_RELEASE);                            \
      }                                                                           \
    f_;                                                                           \
  })

/* A stub: `ret name params` calling the library's `name` with `args`
 * (a parenthesized list of the parameters' names).  IB_LAZY_VOID for a
 * function that returns nothing; variadic functions are written out. */
#define IB_LAZY(lib, ret, name, params, args)                                     \
  ret name params { return IB_LAZY_FN (lib, name) args; }
#define IB_LAZY_VOID(lib, name, params, args)                                     \
  void name params { IB_LAZY_FN (lib, name) args; }

#endif
