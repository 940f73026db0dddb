/* common/lazylib.c — shared libraries loaded on first use (lazylib.h). */
#include "common/lazylib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool sealed; /* atomic: read without the lock (a forked child may
                     * never get a lock another thread held at the fork) */

static void
fail (const char *what, const char *soname, const char *why)
{
  /* (stderr may be buffered by a caller; this is the process's last word) */
  dprintf (STDERR_FILENO, "imgbuild: cannot load %s (needed for %s): %s\n", soname, what, why);
  _exit (127);
}

void *
ib_lazylib_sym (ib_lazylib_t *lib, const char *name)
{
  void *h = __atomic_load_n (&lib->handle, __ATOMIC_ACQUIRE);
  if (h == NULL)
    {
      if (__atomic_load_n (&sealed, __ATOMIC_ACQUIRE))
        fail (lib->what, lib->soname, "not loaded before the sandbox entered the rootfs");
      pthread_mutex_lock (&lock);
      h = lib->handle;
      if (h == NULL)
        {
          h = dlopen (lib->soname, RTLD_NOW | RTLD_LOCAL);
          if (h == NULL)
            {
              const char *e = dlerror ();
              fail (lib->what, lib->soname, e ? e : "dlopen failed");
            }
          __atomic_store_n (&lib->handle, h, __ATOMIC_RELEASE);
        }
      pthread_mutex_unlock (&lock);
    }
  dlerror ();
  void *f = dlsym (h, name);
  if (f == NULL)
    {
      char why[256];
      const char *e = dlerror ();
      snprintf (why, sizeof why, "no function %s in it%s%s", name, e ? ": " : "", e ? e : "");
      fail (lib->what, lib->soname, why);
    }
  /* A program that links the library too exports its stubs to the
   * libraries that call the function, and dlsym may then answer with the
   * stub itself: a call that would never return. */
  Dl_info self, found;
  if (dladdr ((void *) ib_lazylib_sym, &self) && dladdr (f, &found)
      && found.dli_fbase == self.dli_fbase)
    {
      char why[256];
      snprintf (why, sizeof why, "%s resolves to this program's own stub (it links the "
                "library too)", name);
      fail (lib->what, lib->soname, why);
    }
  return f;
}

bool
ib_lazylib_loaded (const ib_lazylib_t *lib)
{
  return __atomic_load_n (&lib->handle, __ATOMIC_ACQUIRE) != NULL;
}

void
ib_lazylib_seal (void)
{
  __atomic_store_n (&sealed, true, __ATOMIC_RELEASE);
}
