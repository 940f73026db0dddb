/* common/proctitle.c — the command line /proc/PID/cmdline shows
 * (common/proctitle.h). */
#include "common/proctitle.h"
#include "common/util.h"

#include <errno.h>
#include <string.h>

static char *area;     /* argv[0]'s bytes as execve() placed them */
static size_t area_len; /* up to and with the last argument's NUL */

void
ib_proctitle_init (int argc, char **argv)
{
  if (argc < 1 || argv[0] == NULL)
    return;
  char *start = argv[0];
  char *end = argv[argc - 1] + strlen (argv[argc - 1]) + 1;
  /* execve() lays the strings out one after the other; anything else
   * (argv built by a caller) is left alone */
  for (int i = 1; i < argc; i++)
    if (argv[i] != argv[i - 1] + strlen (argv[i - 1]) + 1)
      return;
  for (int i = 0; i < argc; i++)
    argv[i] = xstrdup (argv[i]);
  program_invocation_name = argv[0];
  const char *slash = strrchr (argv[0], '/');
  program_invocation_short_name = slash ? (char *) slash + 1 : argv[0];
  area = start;
  area_len = (size_t) (end - start);
}

void
ib_proctitle_set (const char *title)
{
  if (area == NULL || area_len == 0)
    return;
  size_t n = strlen (title);
  if (n > area_len - 1)
    n = area_len - 1;
  memcpy (area, title, n);
  memset (area + n, 0, area_len - n);
}
