/* rootfs/userns.c — put the whole imgbuild process into a user namespace.
 *
 * A process cannot write its own id maps in a useful way (an unprivileged
 * process may only map its own id, and newuidmap must run in the parent
 * namespace), so the maps are written by a helper child forked *before*
 * unshare(CLONE_NEWUSER): the child stays in the original namespace, waits
 * until the parent has unshared, writes /proc/PARENT/{uid,gid}_map (or runs
 * newuidmap/newgidmap), reports the outcome through a pipe and exits.
 */
#include "rootfs/userns.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static ib_userns_mode_t userns_mode = IB_USERNS_AUTO;

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

ib_userns_mode_t
ib_userns_mode (void)
{
  return userns_mode;
}

const char *
ib_userns_mode_name (ib_userns_mode_t m)
{
  switch (m)
    {
    case IB_USERNS_AUTO:
      return "auto";
    case IB_USERNS_ROOT:
      return "root";
    case IB_USERNS_MAP:
      return "map";
    case IB_USERNS_SINGLE:
      return "single";
    }
  return "unknown";
}

/* First range of `user` (by name, or by numeric id) in a subordinate id file
 * (/etc/subuid format: "name:start:count").  Returns true when found. */
static bool
find_subid_range (const char *file, const char *user, unsigned long id,
                  unsigned long *start, unsigned long *count)
{
  cleanup_file FILE *f = fopen (file, "re");
  if (f == NULL)
    return false;
  cleanup_free char *line = NULL;
  size_t cap = 0;
  while (getline (&line, &cap, f) > 0)
    {
      line[strcspn (line, "\r\n")] = '\0';
      char *name = line + strspn (line, " \t");
      if (*name == '\0' || *name == '#')
        continue;
      char *c1 = strchr (name, ':');
      if (c1 == NULL)
        continue;
      *c1 = '\0';
      char *s = c1 + 1;
      char *c2 = strchr (s, ':');
      if (c2 == NULL)
        continue;
      *c2 = '\0';
      char *end = NULL;
      bool match = user != NULL && strcmp (name, user) == 0;
      if (!match && *name >= '0' && *name <= '9')
        {
          errno = 0;
          unsigned long v = strtoul (name, &end, 10);
          match = errno == 0 && *end == '\0' && v == id;
        }
      if (!match)
        continue;
      errno = 0;
      unsigned long st = strtoul (s, &end, 10);
      if (errno != 0 || end == s || *end != '\0')
        continue;
      unsigned long n = strtoul (c2 + 1, &end, 10);
      if (errno != 0 || end == c2 + 1 || (*end != '\0' && *end != ' ' && *end != '\t') || n == 0)
        continue;
      *start = st;
      *count = n;
      return true;
    }
  return false;
}

/* Whether `name` is an executable file in $PATH (or the default PATH). */
static bool
executable_in_path (const char *name)
{
  const char *path = getenv ("PATH");
  if (path == NULL || *path == '\0')
    path = DEFAULT_PATH;
  cleanup_free char *copy = xstrdup (path);
  char *save = NULL;
  for (char *dir = strtok_r (copy, ":", &save); dir; dir = strtok_r (NULL, ":", &save))
    {
      cleanup_free char *p = ib_path_join (dir, name);
      struct stat st;
      if (stat (p, &st) == 0 && S_ISREG (st.st_mode) && access (p, X_OK) == 0)
        return true;
    }
  return false;
}

/* What the helper child needs, computed before fork. */
struct map_plan
{
  ib_userns_mode_t mode;
  pid_t target;
  uid_t uid;
  gid_t gid;
  char *root_uid_map;  /* ROOT: identity map of the current namespace's ranges */
  char *root_gid_map;
  unsigned long subuid_start, subuid_count;
  unsigned long subgid_start, subgid_count;
};

/* Identity map covering every id mapped in the current namespace: from
 * /proc/self/{uid,gid}_map ("inside outside count" lines) build "inside
 * inside count" lines.  In the initial namespace this is "0 0 4294967295";
 * when imgbuild already runs as root of a container it is that container's
 * ranges, which is all we are allowed to map. */
static char *
identity_map_of_self (const char *file, ib_error_t *err)
{
  cleanup_free char *data = NULL;
  if (ib_read_file (file, &data, NULL, err) < 0)
    return NULL;
  ib_buf_t b = { 0 };
  char *save = NULL;
  for (char *line = strtok_r (data, "\n", &save); line; line = strtok_r (NULL, "\n", &save))
    {
      unsigned long inside, outside, count;
      if (sscanf (line, "%lu %lu %lu", &inside, &outside, &count) != 3)
        continue;
      ib_buf_printf (&b, "%lu %lu %lu\n", inside, inside, count);
    }
  if (b.len == 0)
    {
      ib_buf_free (&b);
      ib_error_set (err, EINVAL, "%s: no id ranges", file);
      return NULL;
    }
  return ib_buf_steal (&b);
}

/* --- helper child (runs in the original namespace) ---------------------- */

/* Report "message" to the parent and exit.  Only used in the helper child. */
static void __attribute__ ((noreturn, format (printf, 2, 3)))
helper_fail (int fd, const char *fmt, ...)
{
  char msg[2048];
  va_list ap;
  va_start (ap, fmt);
  int n = vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  if (n < 0)
    n = 0;
  if ((size_t) n >= sizeof msg)
    n = sizeof msg - 1;
  if (write (fd, msg, (size_t) n) < 0)
    _exit (2);
  _exit (1);
}

static void
helper_write_file (int report_fd, pid_t pid, const char *name, const char *data)
{
  char path[64];
  snprintf (path, sizeof path, "/proc/%d/%s", (int) pid, name);
  int fd = open (path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    helper_fail (report_fd, "open %s: %s", path, strerror (errno));
  size_t len = strlen (data);
  ssize_t n = write (fd, data, len);
  if (n < 0 || (size_t) n != len)
    helper_fail (report_fd, "write %s (\"%.*s\"): %s", path,
                 (int) strcspn (data, "\n"), data, n < 0 ? strerror (errno) : "short write");
  close (fd);
}

/* Run newuidmap / newgidmap with its stderr captured into the report. */
static void
helper_run_idmap (int report_fd, const char *prog, pid_t pid, unsigned long own,
                  unsigned long start, unsigned long count)
{
  char spid[32], sown[32], sstart[32], scount[32];
  snprintf (spid, sizeof spid, "%d", (int) pid);
  snprintf (sown, sizeof sown, "%lu", own);
  snprintf (sstart, sizeof sstart, "%lu", start);
  snprintf (scount, sizeof scount, "%lu", count);
  char *argv[] = { (char *) prog, spid, (char *) "0", sown, (char *) "1",
                   (char *) "1", sstart, scount, NULL };
  int p[2];
  if (pipe2 (p, O_CLOEXEC) < 0)
    helper_fail (report_fd, "pipe: %s", strerror (errno));
  pid_t child = fork ();
  if (child < 0)
    helper_fail (report_fd, "fork: %s", strerror (errno));
  if (child == 0)
    {
      dup2 (p[1], 2);
      execvp (prog, argv);
      dprintf (2, "exec %s: %s", prog, strerror (errno));
      _exit (127);
    }
  close (p[1]);
  char out[1024];
  size_t len = 0;
  for (;;)
    {
      ssize_t n = read (p[0], out + len, sizeof out - 1 - len);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      len += (size_t) n;
      if (len == sizeof out - 1)
        break;
    }
  out[len] = '\0';
  while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == ' '))
    out[--len] = '\0';
  close (p[0]);
  int status;
  while (waitpid (child, &status, 0) < 0)
    if (errno != EINTR)
      helper_fail (report_fd, "waitpid %s: %s", prog, strerror (errno));
  if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    helper_fail (report_fd, "%s %s 0 %s 1 1 %s %s failed (status %d)%s%s", prog, spid, sown,
                 sstart, scount, WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status),
                 len ? ": " : "", out);
}

static void __attribute__ ((noreturn))
helper_main (const struct map_plan *plan, int go_fd, int report_fd)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != plan->target)
    _exit (1);
  char c;
  ssize_t n;
  do
    n = read (go_fd, &c, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1)
    _exit (0); /* the parent failed to unshare and closed the pipe */

  char buf[128];
  switch (plan->mode)
    {
    case IB_USERNS_ROOT:
      helper_write_file (report_fd, plan->target, "uid_map", plan->root_uid_map);
      helper_write_file (report_fd, plan->target, "gid_map", plan->root_gid_map);
      break;
    case IB_USERNS_SINGLE:
      /* An unprivileged writer may map only its own gid, and only after
       * setgroups has been denied in the namespace. */
      helper_write_file (report_fd, plan->target, "setgroups", "deny");
      snprintf (buf, sizeof buf, "0 %lu 1\n", (unsigned long) plan->uid);
      helper_write_file (report_fd, plan->target, "uid_map", buf);
      snprintf (buf, sizeof buf, "0 %lu 1\n", (unsigned long) plan->gid);
      helper_write_file (report_fd, plan->target, "gid_map", buf);
      break;
    case IB_USERNS_MAP:
      helper_run_idmap (report_fd, "newuidmap", plan->target, plan->uid, plan->subuid_start,
                        plan->subuid_count);
      helper_run_idmap (report_fd, "newgidmap", plan->target, plan->gid, plan->subgid_start,
                        plan->subgid_count);
      break;
    case IB_USERNS_AUTO:
      break;
    }
  _exit (0);
}

/* --- entering ------------------------------------------------------------ */

static char single_reason[256];

const char *
ib_userns_single_reason (void)
{
  return single_reason[0] ? single_reason : NULL;
}

static int
plan_maps (ib_userns_mode_t requested, struct map_plan *plan, ib_error_t *err)
{
  plan->uid = geteuid ();
  plan->gid = getegid ();
  plan->target = getpid ();

  struct passwd *pw = getpwuid (plan->uid);
  cleanup_free char *user = pw ? xstrdup (pw->pw_name) : NULL;
  bool have_ranges
      = find_subid_range ("/etc/subuid", user, plan->uid, &plan->subuid_start, &plan->subuid_count)
        && find_subid_range ("/etc/subgid", user, plan->uid, &plan->subgid_start,
                             &plan->subgid_count);

  ib_userns_mode_t mode = requested;
  if (mode == IB_USERNS_AUTO)
    {
      if (plan->uid == 0)
        mode = IB_USERNS_ROOT;
      else if (have_ranges && executable_in_path ("newuidmap") && executable_in_path ("newgidmap"))
        mode = IB_USERNS_MAP;
      else
        {
          mode = IB_USERNS_SINGLE;
          if (!have_ranges)
            snprintf (single_reason, sizeof single_reason,
                      "user %s has no subordinate id range in /etc/subuid and /etc/subgid",
                      user ? user : "(unnamed)");
          else
            snprintf (single_reason, sizeof single_reason,
                      "newuidmap and newgidmap are not installed (Debian's uidmap package)");
        }
    }
  plan->mode = mode;

  switch (mode)
    {
    case IB_USERNS_ROOT:
      if (plan->uid != 0)
        return ib_error_set (err, EPERM, "user namespace mode root needs euid 0 (euid is %lu)",
                             (unsigned long) plan->uid);
      plan->root_uid_map = identity_map_of_self ("/proc/self/uid_map", err);
      if (plan->root_uid_map == NULL)
        return -1;
      plan->root_gid_map = identity_map_of_self ("/proc/self/gid_map", err);
      if (plan->root_gid_map == NULL)
        return -1;
      break;
    case IB_USERNS_MAP:
      if (!have_ranges)
        return ib_error_set (err, ENOENT,
                             "user namespace mode map: no range for %s (uid %lu) in both "
                             "/etc/subuid and /etc/subgid; as root: usermod --add-subuids "
                             "100000-165535 --add-subgids 100000-165535 %s (or add "
                             "'%s:100000:65536' to both files)",
                             user ? user : "?", (unsigned long) plan->uid, user ? user : "USER",
                             user ? user : "USER");
      break;
    default:
      break;
    }
  return 0;
}

int
ib_userns_plan (ib_userns_mode_t requested, ib_userns_mode_t *mode, ib_error_t *err)
{
  if (userns_mode != IB_USERNS_AUTO)
    {
      *mode = userns_mode;
      return 0;
    }
  struct map_plan plan = { 0 };
  int r = plan_maps (requested, &plan, err);
  free (plan.root_uid_map);
  free (plan.root_gid_map);
  if (r < 0)
    return ib_error_prefix (err, "enter user namespace");
  *mode = plan.mode;
  return 0;
}

int
ib_userns_enter (ib_userns_mode_t requested, ib_userns_mode_t *mode_in_force, ib_error_t *err)
{
  if (userns_mode != IB_USERNS_AUTO)
    {
      if (mode_in_force)
        *mode_in_force = userns_mode;
      return 0;
    }

  struct map_plan plan = { 0 };
  cleanup_free char *free_uid_map = NULL;
  cleanup_free char *free_gid_map = NULL;
  int r = plan_maps (requested, &plan, err);
  free_uid_map = plan.root_uid_map;
  free_gid_map = plan.root_gid_map;
  if (r < 0)
    return ib_error_prefix (err, "enter user namespace");

  int go[2], report[2];
  if (pipe2 (go, O_CLOEXEC) < 0)
    return ib_error_sys (err, errno, "enter user namespace: pipe");
  if (pipe2 (report, O_CLOEXEC) < 0)
    {
      int e = errno;
      close (go[0]);
      close (go[1]);
      return ib_error_sys (err, e, "enter user namespace: pipe");
    }
  cleanup_close int go_w = go[1];
  cleanup_close int report_r = report[0];

  fflush (NULL); /* don't duplicate buffered output in the helper */
  pid_t helper = fork ();
  if (helper < 0)
    {
      int e = errno;
      close (go[0]);
      close (report[1]);
      return ib_error_sys (err, e, "enter user namespace: fork");
    }
  if (helper == 0)
    {
      close (go[1]);
      close (report[0]);
      helper_main (&plan, go[0], report[1]);
    }
  close (go[0]);
  close (report[1]);

  if (unshare (CLONE_NEWUSER) < 0)
    {
      int e = errno;
      close (steal_fd (&go_w)); /* the helper sees EOF and exits */
      while (waitpid (helper, NULL, 0) < 0 && errno == EINTR)
        ;
      if (e == EINVAL)
        return ib_error_sys (err, e,
                             "enter user namespace: unshare(CLONE_NEWUSER) (the process must not "
                             "have started threads yet)");
      return ib_error_sys (err, e,
                           "enter user namespace: unshare(CLONE_NEWUSER) (are unprivileged user "
                           "namespaces disabled? see /proc/sys/user/max_user_namespaces)");
    }

  ssize_t n;
  do
    n = write (go_w, "g", 1);
  while (n < 0 && errno == EINTR);

  ib_buf_t msg = { 0 };
  char tmp[1024];
  for (;;)
    {
      ssize_t k = read (report_r, tmp, sizeof tmp);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        break;
      ib_buf_append (&msg, tmp, (size_t) k);
    }
  int status = 0;
  while (waitpid (helper, &status, 0) < 0)
    if (errno != EINTR)
      {
        int e = errno;
        ib_buf_free (&msg);
        return ib_error_sys (err, e, "enter user namespace: waitpid");
      }
  if (msg.len > 0 || !WIFEXITED (status) || WEXITSTATUS (status) != 0)
    {
      /* We are in a namespace without maps now; the caller cannot go on. */
      ib_error_set (err, EPERM, "enter user namespace (mode %s): %s", ib_userns_mode_name (plan.mode),
                    msg.len ? msg.data : "id map helper failed");
      ib_buf_free (&msg);
      return -1;
    }
  ib_buf_free (&msg);

  if (plan.mode != IB_USERNS_SINGLE && setgroups (0, NULL) < 0)
    return ib_error_sys (err, errno, "enter user namespace: setgroups");
  if (setresgid (0, 0, 0) < 0)
    return ib_error_sys (err, errno, "enter user namespace: setresgid(0)");
  if (setresuid (0, 0, 0) < 0)
    return ib_error_sys (err, errno, "enter user namespace: setresuid(0)");
  /* Changing credentials may clear the dumpable flag, which would make
   * /proc/self/... owned by the overflow id and unreadable to us. */
  prctl (PR_SET_DUMPABLE, 1);
  /* A mount namespace of our own: the rootfs overlays (overlay.h) are
   * mounted there, unseen by the host, and vanish with the process. */
  if (unshare (CLONE_NEWNS) < 0 || mount (NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    ib_debug ("no private mount namespace (%s): rootfs trees will be copied", strerror (errno));

  userns_mode = plan.mode;
  ib_debug ("entered user namespace (mode %s)", ib_userns_mode_name (plan.mode));
  if (mode_in_force)
    *mode_in_force = plan.mode;
  return 0;
}
