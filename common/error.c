#include "common/error.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
set_va (ib_error_t *err, int status, int with_errno, const char *fmt, va_list ap)
{
  char *msg = NULL;
  if (vasprintf (&msg, fmt, ap) < 0)
    abort ();
  if (with_errno)
    {
      char *full = xasprintf ("%s: %s", msg, strerror (status));
      free (msg);
      msg = full;
    }
  if (err == NULL)
    {
      free (msg);
      return -1;
    }
  if (*err != NULL) /* keep the first error, add nothing */
    {
      free (msg);
      return -1;
    }
  *err = xmalloc (sizeof **err);
  (*err)->status = status;
  (*err)->msg = msg;
  return -1;
}

int
ib_error_set (ib_error_t *err, int status, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  int r = set_va (err, status, 0, fmt, ap);
  va_end (ap);
  return r;
}

int
ib_error_sys (ib_error_t *err, int status, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  int r = set_va (err, status, 1, fmt, ap);
  va_end (ap);
  return r;
}

int
ib_error_prefix (ib_error_t *err, const char *fmt, ...)
{
  if (err == NULL || *err == NULL)
    return -1;
  char *ctx = NULL;
  va_list ap;
  va_start (ap, fmt);
  if (vasprintf (&ctx, fmt, ap) < 0)
    abort ();
  va_end (ap);
  char *full = xasprintf ("%s: %s", ctx, (*err)->msg);
  free (ctx);
  free ((*err)->msg);
  (*err)->msg = full;
  return -1;
}

int
ib_error_propagate (ib_error_t *err, ib_error_t *from)
{
  if (err != NULL && *err == NULL)
    *err = *from;
  else
    ib_error_free (from);
  *from = NULL;
  return -1;
}

void
ib_error_free (ib_error_t *err)
{
  if (err == NULL || *err == NULL)
    return;
  free ((*err)->msg);
  free (*err);
  *err = NULL;
}

void
ib_error_report (ib_error_t *err)
{
  if (err == NULL || *err == NULL)
    return;
  /* The message quotes user text (a recipe's words, an image reference, a
   * command's last output lines): no control character reaches the
   * terminal as is (an escape sequence could retitle it, hide lines, fake
   * a success); the newlines of multi-line messages stay. */
  char *msg = ib_str_printable ((*err)->msg, true);
  fprintf (stderr, "imgbuild: %s\n", msg);
  free (msg);
  ib_error_free (err);
}
