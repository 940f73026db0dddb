/* oci/lazy_curl.c — libcurl, loaded on its first use (common/lazylib.h):
 * a stub per function imgbuild calls.  A function used for the first
 * time gets a line here (the build fails with an undefined reference
 * until it has one); the compiler checks each against <curl/curl.h>. */
#define CURL_DISABLE_TYPECHECK 1 /* (its macros would rename the functions) */
#include "common/lazylib.h"

#include <curl/curl.h>
#include <stdarg.h>

IB_LAZYLIB (curl_lib, IB_SONAME_CURL, "registries and URLs");

IB_LAZY_VOID (curl_lib, curl_easy_cleanup, (CURL *a0), (a0))
IB_LAZY (curl_lib, char *, curl_easy_escape, (CURL *a0, const char *a1, int a2), (a0, a1, a2))
IB_LAZY (curl_lib, CURL *, curl_easy_init, (void), ())
IB_LAZY (curl_lib, CURLcode, curl_easy_perform, (CURL *a0), (a0))
IB_LAZY_VOID (curl_lib, curl_easy_reset, (CURL *a0), (a0))
IB_LAZY (curl_lib, const char *, curl_easy_strerror, (CURLcode a0), (a0))
IB_LAZY_VOID (curl_lib, curl_free, (void *a0), (a0))
IB_LAZY (curl_lib, time_t, curl_getdate, (const char *a0, const time_t *a1), (a0, a1))
IB_LAZY (curl_lib, CURLcode, curl_global_init, (long a0), (a0))
IB_LAZY (curl_lib, CURLMcode, curl_multi_add_handle, (CURLM *a0, CURL *a1), (a0, a1))
IB_LAZY (curl_lib, CURLMcode, curl_multi_cleanup, (CURLM *a0), (a0))
IB_LAZY (curl_lib, CURLMsg *, curl_multi_info_read, (CURLM *a0, int *a1), (a0, a1))
IB_LAZY (curl_lib, CURLM *, curl_multi_init, (void), ())
IB_LAZY (curl_lib, CURLMcode, curl_multi_perform, (CURLM *a0, int *a1), (a0, a1))
IB_LAZY (curl_lib, CURLMcode, curl_multi_poll, (CURLM *a0, struct curl_waitfd a1[], unsigned int a2, int a3, int *a4), (a0, a1, a2, a3, a4))
IB_LAZY (curl_lib, CURLMcode, curl_multi_remove_handle, (CURLM *a0, CURL *a1), (a0, a1))
IB_LAZY (curl_lib, const char *, curl_multi_strerror, (CURLMcode a0), (a0))
IB_LAZY (curl_lib, CURLMcode, curl_multi_wakeup, (CURLM *a0), (a0))
IB_LAZY (curl_lib, struct curl_slist *, curl_slist_append, (struct curl_slist *a0, const char *a1), (a0, a1))
IB_LAZY_VOID (curl_lib, curl_slist_free_all, (struct curl_slist *a0), (a0))
IB_LAZY (curl_lib, CURLU *, curl_url, (void), ())
IB_LAZY_VOID (curl_lib, curl_url_cleanup, (CURLU *a0), (a0))
IB_LAZY (curl_lib, CURLUcode, curl_url_get, (CURLU *a0, CURLUPart a1, char **a2, unsigned int a3), (a0, a1, a2, a3))
IB_LAZY (curl_lib, CURLUcode, curl_url_set, (CURLU *a0, CURLUPart a1, const char *a2, unsigned int a3), (a0, a1, a2, a3))

/* The variadic ones.  The one argument after an option, by the option's
 * type (CURLOPTTYPE_*, as curl_easy_setopt reads it); every CURLINFO_*
 * takes a pointer. */
#define CURL_VA_CALL(f, h, o, ap)                                                \
  ((o) < CURLOPTTYPE_OBJECTPOINT ? f (h, o, va_arg (ap, long))                   \
   : (o) < CURLOPTTYPE_OFF_T     ? f (h, o, va_arg (ap, void *))                 \
   : (o) < CURLOPTTYPE_BLOB      ? f (h, o, va_arg (ap, curl_off_t))             \
                                 : f (h, o, va_arg (ap, void *)))

CURLcode
curl_easy_setopt (CURL *h, CURLoption o, ...)
{
  __typeof__ (curl_easy_setopt) *f = IB_LAZY_FN (curl_lib, curl_easy_setopt);
  va_list ap;
  va_start (ap, o);
  CURLcode r = CURL_VA_CALL (f, h, o, ap);
  va_end (ap);
  return r;
}

CURLMcode
curl_multi_setopt (CURLM *h, CURLMoption o, ...)
{
  __typeof__ (curl_multi_setopt) *f = IB_LAZY_FN (curl_lib, curl_multi_setopt);
  va_list ap;
  va_start (ap, o);
  CURLMcode r = CURL_VA_CALL (f, h, o, ap);
  va_end (ap);
  return r;
}

CURLcode
curl_easy_getinfo (CURL *h, CURLINFO info, ...)
{
  __typeof__ (curl_easy_getinfo) *f = IB_LAZY_FN (curl_lib, curl_easy_getinfo);
  va_list ap;
  va_start (ap, info);
  CURLcode r = f (h, info, va_arg (ap, void *));
  va_end (ap);
  return r;
}
