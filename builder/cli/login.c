/* imgbuild login and logout: credentials checked with the registry and
 * kept in the auth file (oci/auth.h). */
#include "builder/cli/cli.h"
#include "common/util.h"
#include "oci/auth.h"
#include "oci/registry.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

/* The registry part of a login argument ("host[:port][/path]", scheme
 * already dropped), checked for characters a host cannot have. */
static char *
login_host (const char *cmd, const char *key)
{
  char *host = xstrndup (key, strcspn (key, "/"));
  bool ok = *host != '\0';
  for (const char *p = host; *p && ok; p++)
    ok = isalnum ((unsigned char) *p) || strchr (".-:[]_", *p);
  if (!ok)
    {
      fprintf (stderr, "imgbuild: %s: '%s' is not a registry (HOST[:PORT])\nTry 'imgbuild --help'.\n",
               cmd, key);
      exit (2);
    }
  return host;
}

/* One line from stdin without its newline; NULL at EOF.  Echo off while
 * reading when `secret` (stdin is a terminal). */
static char *
prompt_line (const char *prompt, bool secret)
{
  struct termios old, quiet;
  bool restore = false;
  /* Echo off before the prompt shows, and without flushing: what is typed
   * (or written by a program) once the prompt is seen must not be lost. */
  if (secret && tcgetattr (STDIN_FILENO, &old) == 0)
    {
      quiet = old;
      quiet.c_lflag &= ~(tcflag_t) ECHO;
      quiet.c_lflag |= ECHONL;
      restore = tcsetattr (STDIN_FILENO, TCSANOW, &quiet) == 0;
    }
  fputs (prompt, stderr);
  fflush (stderr);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n = getline (&line, &cap, stdin);
  if (restore)
    tcsetattr (STDIN_FILENO, TCSANOW, &old);
  if (n < 0)
    {
      free (line);
      return NULL;
    }
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
    line[--n] = '\0';
  return line;
}

static void
free_secret (char *s)
{
  if (s)
    {
      explicit_bzero (s, strlen (s));
      free (s);
    }
}

int
cmd_login (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "username", required_argument, NULL, 'u' }, { "password", required_argument, NULL, 'p' },
    { "password-stdin", no_argument, NULL, 'S' }, { "authfile", required_argument, NULL, 'A' },
    GLOBAL_OPTIONS, { NULL, 0, NULL, 0 },
  };
  const char *user_arg = NULL, *pass_arg = NULL;
  bool pass_stdin = false;
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "u:p:q", opts, NULL)) != -1)
    switch (c)
      {
      case 'u': user_arg = optarg; break;
      case 'p': pass_arg = optarg; break;
      case 'S': pass_stdin = true; break;
      case 'A': ib_auth_set_authfile (optarg); break;
      default:
        if (!global_option (c, optarg, "login"))
          exit (2);
      }
  if (argc - optind != 1)
    usage_error ("%s", "login: expected one REGISTRY");
  if (pass_arg && pass_stdin)
    usage_error ("%s", "login: -p and --password-stdin exclude each other");
  cleanup_free char *key = ib_auth_normalize_key (argv[optind]);
  cleanup_free char *host = login_host ("login", key);
  char *user = xstrdup (user_arg), *pass = xstrdup (pass_arg);
  bool tty = isatty (STDIN_FILENO);
  if (pass_stdin)
    {
      if (user == NULL)
        usage_error ("%s", "login: --password-stdin needs -u USER");
      ib_buf_t b = { 0 };
      char buf[4096];
      size_t n;
      while ((n = fread (buf, 1, sizeof buf, stdin)) > 0)
        ib_buf_append (&b, buf, n);
      explicit_bzero (buf, sizeof buf);
      while (b.len > 0 && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == '\r'))
        b.data[--b.len] = '\0';
      pass = ib_buf_steal (&b);
    }
  else if (pass == NULL || user == NULL)
    {
      if (!tty)
        usage_error ("%s", "login: stdin is not a terminal: give -u USER with -p PASSWORD or "
                     "--password-stdin");
      if (user == NULL)
        user = prompt_line ("Username: ", false);
      if (pass == NULL && user)
        pass = prompt_line ("Password: ", true);
    }
  else
    ib_warn ("login: a password on the command line is visible to other users; prefer "
             "--password-stdin");
  int ret = 0;
  if (user == NULL || *user == '\0' || strchr (user, ':'))
    ret = ib_error_set (err, EINVAL, "login %s: the user name is empty or contains ':'", host);
  else if (pass == NULL || *pass == '\0')
    ret = ib_error_set (err, EINVAL, "login %s: the password is empty", host);
  cleanup_free char *file = NULL;
  if (ret == 0 && (file = ib_auth_default_file (err)) == NULL)
    ret = -1;
  if (ret == 0 && ib_registry_login (host, user, pass, err) < 0)
    ret = ib_error_prefix (err, "login %s", host);
  if (ret == 0 && ib_auth_store (file, key, user, pass, err) < 0)
    ret = ib_error_prefix (err, "login %s", host);
  free_secret (user);
  free_secret (pass);
  if (ret == 0)
    printf ("Login Succeeded (credentials for %s stored in %s)\n", key, file);
  return ret;
}

int
cmd_logout (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = { { "all", no_argument, NULL, 'a' },
                                        { "authfile", required_argument, NULL, 'A' },
                                        GLOBAL_OPTIONS, { NULL, 0, NULL, 0 } };
  bool all = false;
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "aq", opts, NULL)) != -1)
    switch (c)
      {
      case 'a': all = true; break;
      case 'A': ib_auth_set_authfile (optarg); break;
      default:
        if (!global_option (c, optarg, "logout"))
          exit (2);
      }
  if (all ? argc - optind != 0 : argc - optind != 1)
    usage_error ("%s", "logout: expected one REGISTRY, or --all");
  cleanup_free char *key = all ? NULL : ib_auth_normalize_key (argv[optind]);
  if (key)
    free (login_host ("logout", key));
  cleanup_free char *file = ib_auth_default_file (err);
  if (file == NULL)
    return -1;
  bool removed;
  if (ib_auth_remove (file, key, &removed, err) < 0)
    return ib_error_prefix (err, "logout %s", all ? "--all" : key);
  if (all)
    printf ("Removed all credentials from %s\n", file);
  else if (removed)
    printf ("Removed credentials for %s from %s\n", key, file);
  else
    return ib_error_set (err, ENOENT, "logout %s: not logged in (no credentials for it in %s)", key,
                         file);
  return 0;
}
