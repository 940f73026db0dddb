/* builder/engine/secrets.c — see secrets.h: --secret and --ssh, and one
 * step's secret files and agent relay. */
#include "builder/engine/secrets.h"
#include "builder/engine/agent_filter.h"
#include "common/util.h"
#include "rootfs/userns.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- the build's sources ---- */

static void
secret_source_clear (ib_secret_source_t *s)
{
  free (s->id);
  free (s->path);
  free (s->env);
  if (s->fd >= 0)
    close (s->fd);
  memset (s, 0, sizeof *s);
  s->fd = -1;
}

void
ib_secrets_clear (ib_secrets_t *s)
{
  for (size_t i = 0; i < s->n_secrets; i++)
    secret_source_clear (&s->secrets[i]);
  for (size_t i = 0; i < s->n_ssh; i++)
    {
      free (s->ssh[i].id);
      free (s->ssh[i].socket);
    }
  free (s->secrets);
  free (s->ssh);
  memset (s, 0, sizeof *s);
}

const ib_secret_source_t *
ib_secrets_find_secret (const ib_secrets_t *s, const char *id)
{
  for (size_t i = 0; s && i < s->n_secrets; i++)
    if (strcmp (s->secrets[i].id, id) == 0)
      return &s->secrets[i];
  return NULL;
}

const ib_ssh_source_t *
ib_secrets_find_ssh (const ib_secrets_t *s, const char *id)
{
  for (size_t i = 0; s && i < s->n_ssh; i++)
    if (strcmp (s->ssh[i].id, id) == 0)
      return &s->ssh[i];
  return NULL;
}

int
ib_secrets_add_secret (ib_secrets_t *s, const char *value, ib_error_t *err)
{
  ib_secret_source_t src = { .fd = -1 };
  cleanup_free char *copy = xstrdup (value);
  char *save = NULL;
  const char *type = NULL;
  for (char *f = strtok_r (copy, ",", &save); f; f = strtok_r (NULL, ",", &save))
    {
      char *eq = strchr (f, '=');
      if (eq == NULL)
        {
          ib_error_set (err, EINVAL, "--secret %s: expected KEY=VALUE, got '%s'", value, f);
          goto fail;
        }
      *eq = '\0';
      const char *v = eq + 1;
      char **slot = NULL;
      if (strcasecmp (f, "type") == 0)
        {
          if (strcmp (v, "file") && strcmp (v, "env"))
            {
              ib_error_set (err, EINVAL, "--secret %s: type takes file or env, got '%s'", value, v);
              goto fail;
            }
          type = v;
          continue;
        }
      if (strcasecmp (f, "id") == 0)
        slot = &src.id;
      else if (strcasecmp (f, "src") == 0 || strcasecmp (f, "source") == 0)
        slot = &src.path;
      else if (strcasecmp (f, "env") == 0)
        slot = &src.env;
      else
        {
          ib_error_set (err, EINVAL, "--secret %s: unknown key '%s' (id, src, env, type)", value,
                        f);
          goto fail;
        }
      free (*slot);
      *slot = *v ? xstrdup (v) : NULL;
    }
  if (src.id == NULL)
    {
      ib_error_set (err, EINVAL, "--secret %s: id= is missing", value);
      goto fail;
    }
  if (type && strcmp (type, "env") == 0 && src.env == NULL)
    {
      src.env = src.path;
      src.path = NULL;
    }
  if (src.env == NULL && src.path == NULL)
    {
      /* BuildKit: the variable ID if set, else the file ID */
      if (getenv (src.id))
        src.env = xstrdup (src.id);
      else
        src.path = xstrdup (src.id);
    }
  if (src.env && src.path)
    {
      free (src.path); /* BuildKit reads the variable when both are given */
      src.path = NULL;
    }
  for (size_t i = 0; i < s->n_secrets; i++)
    if (strcmp (s->secrets[i].id, src.id) == 0)
      {
        secret_source_clear (&s->secrets[i]);
        s->secrets[i] = src;
        return 0;
      }
  s->secrets = xrealloc (s->secrets, sizeof *s->secrets * (s->n_secrets + 1));
  s->secrets[s->n_secrets++] = src;
  return 0;
fail:
  secret_source_clear (&src);
  return -1;
}

int
ib_secrets_add_ssh (ib_secrets_t *s, const char *value, ib_error_t *err)
{
  const char *eq = strchr (value, '=');
  cleanup_free char *id = eq ? xstrndup (value, (size_t) (eq - value)) : xstrdup (value);
  if (*id == '\0')
    return ib_error_set (err, EINVAL, "--ssh %s: expected default, ID or ID=SOCKET", value);
  char *sock = NULL;
  if (eq && eq[1])
    {
      if (strchr (eq + 1, ','))
        return ib_error_set (err, ENOTSUP,
                             "--ssh %s: one agent socket per id (lists of paths and key files "
                             "are not supported: load keys into an agent with ssh-add)",
                             value);
      sock = xstrdup (eq + 1);
    }
  else
    {
      const char *a = getenv ("SSH_AUTH_SOCK");
      if (a == NULL || *a == '\0')
        return ib_error_set (err, EINVAL,
                             "--ssh %s: SSH_AUTH_SOCK is not set (start an agent, or give "
                             "%s=SOCKET)",
                             value, id);
      sock = xstrdup (a);
    }
  for (size_t i = 0; i < s->n_ssh; i++)
    if (strcmp (s->ssh[i].id, id) == 0)
      {
        free (s->ssh[i].socket);
        s->ssh[i].socket = sock;
        return 0;
      }
  s->ssh = xrealloc (s->ssh, sizeof *s->ssh * (s->n_ssh + 1));
  s->ssh[s->n_ssh++] = (ib_ssh_source_t){ .id = steal_pointer (&id), .socket = sock };
  return 0;
}

int
ib_secrets_check (ib_secrets_t *s, ib_error_t *err)
{
  struct stat st;
  for (size_t i = 0; i < s->n_secrets; i++)
    {
      ib_secret_source_t *src = &s->secrets[i];
      if (src->env && getenv (src->env) == NULL)
        return ib_error_set (err, EINVAL, "--secret id=%s: variable %s is not set", src->id,
                             src->env);
      if (src->env || src->fd >= 0)
        continue;
      int fd = open (src->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
      if (fd < 0)
        return ib_error_sys (err, errno, "--secret id=%s: %s", src->id, src->path);
      const char *bad = NULL;
      int e = 0, status = EINVAL;
      if (fstat (fd, &st) < 0)
        e = errno;
      else if (!S_ISREG (st.st_mode))
        bad = "is not a file";
      else if ((size_t) st.st_size > IB_SECRET_MAX)
        bad = "is over 500 KiB, BuildKit's limit", status = EFBIG;
      if (e || bad)
        {
          close (fd);
          return e ? ib_error_sys (err, e, "--secret id=%s: %s", src->id, src->path)
                   : ib_error_set (err, status, "--secret id=%s: %s %s", src->id, src->path,
                                   bad);
        }
      src->fd = fd;
    }
  for (size_t i = 0; i < s->n_ssh; i++)
    {
      if (stat (s->ssh[i].socket, &st) < 0)
        return ib_error_sys (err, errno, "--ssh %s: %s", s->ssh[i].id, s->ssh[i].socket);
      if (!S_ISSOCK (st.st_mode))
        return ib_error_set (err, ENOTSUP,
                             "--ssh %s: %s is not a socket (imgbuild forwards agent sockets; "
                             "load a key with ssh-add into an agent)",
                             s->ssh[i].id, s->ssh[i].socket);
      char *abs = realpath (s->ssh[i].socket, NULL);
      if (abs)
        {
          free (s->ssh[i].socket);
          s->ssh[i].socket = abs;
        }
    }
  return 0;
}

void
ib_secret_free (char *data, size_t len)
{
  if (data)
    explicit_bzero (data, len);
  free (data);
}

int
ib_secret_read (const ib_secret_source_t *src, char **data, size_t *len, ib_error_t *err)
{
  *data = NULL;
  *len = 0;
  if (src->env)
    {
      const char *v = getenv (src->env);
      if (v == NULL)
        return ib_error_set (err, ENOENT, "secret %s: variable %s is not set", src->id, src->env);
      if (strlen (v) > IB_SECRET_MAX)
        return ib_error_set (err, EFBIG, "secret %s: over %zu KiB", src->id, IB_SECRET_MAX / 1024);
      *len = strlen (v);
      *data = xstrdup (v);
      return 0;
    }
  if (src->fd < 0)
    {
      if (ib_read_file_max (src->path, IB_SECRET_MAX, NULL, data, len, err) < 0)
        return ib_error_prefix (err, "secret %s", src->id);
      return 0;
    }
  /* the file ib_secrets_check opened, read from its start each time */
  char *buf = xmalloc (IB_SECRET_MAX + 2);
  size_t n = 0;
  for (;;)
    {
      ssize_t got = pread (src->fd, buf + n, IB_SECRET_MAX + 1 - n, (off_t) n);
      if (got < 0 && errno == EINTR)
        continue;
      if (got < 0)
        {
          int e = errno;
          ib_secret_free (buf, n);
          return ib_error_sys (err, e, "secret %s: read %s", src->id, src->path);
        }
      if (got == 0 || (n += (size_t) got) > IB_SECRET_MAX)
        break;
    }
  if (n > IB_SECRET_MAX)
    {
      ib_secret_free (buf, n);
      return ib_error_set (err, EFBIG, "secret %s: %s is over %zu KiB", src->id, src->path,
                           IB_SECRET_MAX / 1024);
    }
  buf[n] = '\0';
  *data = buf;
  *len = n;
  return 0;
}

/* ---- one step's files and sockets ---- */

struct ib_secret_run
{
  char *dir;       /* the private directory */
  bool mounted;    /* a tmpfs is on it */
  char **paths;    /* every file and socket made in it */
  int *listen;     /* the sockets' listening fds */
  char **agents;   /* per listening socket, the agent it relays to */
  size_t n_listen;
  int stop[2];     /* the relay thread ends when stop[0] is readable */
  pthread_t thread;
  bool running;
};

static int
run_dir (ib_secret_run_t **run, ib_error_t *err)
{
  if (*run)
    return 0;
  const char *tmp = getenv ("TMPDIR");
  cleanup_free char *dir = xasprintf ("%s/imgbuild-secrets-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp (dir) == NULL)
    return ib_error_sys (err, errno, "secrets: make a private directory %s", dir);
  ib_secret_run_t *r = xmalloc (sizeof *r);
  r->stop[0] = r->stop[1] = -1;
  /* In imgbuild's own mount namespace (rootfs/userns.h): memory only,
   * unseen by the host, gone with the process even when it is killed. */
  r->mounted = ib_userns_mode () != IB_USERNS_AUTO /* never on the host's mount table */
               && mount ("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                         "mode=0700,size=16m")
                      == 0;
  if (!r->mounted)
    ib_debug ("secrets: no tmpfs on %s (%s): files on its file system, removed after the step",
              dir, strerror (errno));
  r->dir = steal_pointer (&dir);
  *run = r;
  return 0;
}

/* A new name in the private directory (kept in r->paths; borrowed). */
static const char *
run_name (ib_secret_run_t *r, const char *kind)
{
  size_t n = ib_strv_len (r->paths);
  cleanup_free char *p = xasprintf ("%s/%s%zu", r->dir, kind, n);
  ib_strv_push (&r->paths, p);
  return r->paths[n];
}

/* chown in the user namespace; in single-id mode only 0 exists (the step
 * runs as 0 there anyway), so another id leaves 0:0. */
static int
own (const char *path, uid_t uid, gid_t gid, ib_error_t *err)
{
  if (fchownat (AT_FDCWD, path, uid, gid, AT_SYMLINK_NOFOLLOW) == 0
      || (errno == EINVAL && ib_userns_mode () == IB_USERNS_SINGLE))
    return 0;
  return ib_error_sys (err, errno, "secrets: chown %s to %u:%u", path, (unsigned) uid,
                       (unsigned) gid);
}

int
ib_secret_run_file (ib_secret_run_t **run, const char *data, size_t len, mode_t mode, uid_t uid,
                    gid_t gid, const char **path, ib_error_t *err)
{
  if (run_dir (run, err) < 0)
    return -1;
  const char *p = run_name (*run, "s");
  cleanup_close int fd = open (p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return ib_error_sys (err, errno, "secrets: create %s", p);
  if (ib_write_all (fd, data, len, p, err) < 0 || own (p, uid, gid, err) < 0)
    return -1;
  if (fchmod (fd, mode) < 0)
    return ib_error_sys (err, errno, "secrets: chmod %s", p);
  *path = p;
  return 0;
}

/* A sockaddr_un for `path`; a path too long for sun_path goes through
 * /proc/self/fd/N of its directory (*dirfd, the caller closes). */
static int
unix_addr (const char *path, struct sockaddr_un *a, int *dirfd, ib_error_t *err)
{
  memset (a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  *dirfd = -1;
  if (strlen (path) < sizeof a->sun_path)
    {
      memcpy (a->sun_path, path, strlen (path) + 1);
      return 0;
    }
  const char *slash = strrchr (path, '/');
  cleanup_free char *dir = slash ? xstrndup (path, (size_t) (slash - path)) : xstrdup (".");
  *dirfd = open (*dir ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (*dirfd < 0)
    return ib_error_sys (err, errno, "socket %s", path);
  int n = snprintf (a->sun_path, sizeof a->sun_path, "/proc/self/fd/%d/%s", *dirfd,
                    slash ? slash + 1 : path);
  if (n < 0 || (size_t) n >= sizeof a->sun_path)
    return ib_error_set (err, ENAMETOOLONG, "socket %s: name too long", path);
  return 0;
}

int
ib_secret_run_ssh (ib_secret_run_t **run, const char *agent, mode_t mode, uid_t uid, gid_t gid,
                   const char **path, ib_error_t *err)
{
  if (run_dir (run, err) < 0)
    return -1;
  ib_secret_run_t *r = *run;
  const char *p = run_name (r, "ssh");
  struct sockaddr_un a;
  cleanup_close int dirfd = -1;
  if (unix_addr (p, &a, &dirfd, err) < 0)
    return -1;
  cleanup_close int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind (fd, (struct sockaddr *) &a, sizeof a) < 0 || listen (fd, 16) < 0)
    return ib_error_sys (err, errno, "ssh: listen on %s", p);
  if (own (p, uid, gid, err) < 0)
    return -1;
  if (fchmodat (AT_FDCWD, p, mode, 0) < 0)
    return ib_error_sys (err, errno, "ssh: chmod %s", p);
  r->listen = xrealloc (r->listen, sizeof (int) * (r->n_listen + 1));
  r->listen[r->n_listen++] = steal_fd (&fd);
  ib_strv_push (&r->agents, agent);
  *path = p;
  return 0;
}

/* A connection to the agent at `path` (non-blocking), or -1. */
static int
agent_connect (const char *path)
{
  struct sockaddr_un a;
  cleanup_close int dirfd = -1;
  if (unix_addr (path, &a, &dirfd, NULL) < 0)
    return -1;
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0
      && (connect (fd, (struct sockaddr *) &a, sizeof a) < 0
          || fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK) < 0))
    {
      ib_debug ("ssh: connect to the agent %s: %s", path, strerror (errno));
      close (fd);
      fd = -1;
    }
  return fd;
}

/* ---- the relay ----
 *
 * A read-only agent, as BuildKit's (moby/buildkit
 * session/sshforward/sshprovider/agentprovider.go: readOnlyAgent served by
 * golang.org/x/crypto ssh/agent's ServeAgent; agent_filter.h says what
 * passes): each connection to a step's socket gets one to its agent and
 * carries one request at a time.
 * The relay reads one whole request frame from the step; a request the
 * filter passes goes to the agent and exactly one whole reply frame comes
 * back, any other is answered SSH_AGENT_FAILURE by the relay itself (the
 * agent sees nothing).  A step's next request waits in its socket until
 * then, so replies keep the order of the requests.  A frame over
 * IB_AGENT_MSG_MAX or of length 0, either way, or either side closing,
 * ends the connection.  The sockets are non-blocking once connected: one
 * slow peer holds up no other connection. */

enum conn_state
{
  READ_REQUEST, /* reading a request frame from the step */
  TO_AGENT,     /* writing it to the agent */
  READ_REPLY,   /* reading the agent's reply frame */
  TO_STEP,      /* writing the reply (or a failure) to the step */
};

struct conn
{
  int fd[2]; /* the step's side, the agent's */
  enum conn_state state;
  unsigned char *buf; /* the frame in flight, length word included */
  size_t cap;         /* bytes allocated at buf */
  size_t have;        /* bytes of it read, or written */
  size_t len;         /* bytes in the frame (once whole) */
  unsigned char request; /* the type of the request forwarded */
};

/* Read more of a frame from `fd` into c->buf, never past its end (what
 * follows stays in the socket): 1 once whole (c->len), 0 to wait, -1 to
 * close (end of file, an error, a bad length). */
static int
conn_read_frame (struct conn *c, int fd)
{
  for (;;)
    {
      size_t need = 0;
      ib_agent_frame_t f = ib_agent_frame (c->buf, c->have, &need);
      if (f == IB_AGENT_FRAME_BAD)
        {
          ib_debug ("ssh: agent frame of a bad length (0 or over %zu bytes): connection closed",
                    IB_AGENT_MSG_MAX);
          return -1;
        }
      if (f == IB_AGENT_FRAME_WHOLE)
        {
          c->len = need;
          return 1;
        }
      if (need > c->cap)
        {
          c->buf = xrealloc (c->buf, need);
          c->cap = need;
        }
      ssize_t got = read (fd, c->buf + c->have, need - c->have);
      if (got < 0 && errno == EINTR)
        continue;
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
      if (got <= 0)
        return -1;
      c->have += (size_t) got;
    }
}

/* Write the rest of c->buf[0..len) to `fd`: 1 when all is written, 0 to
 * wait, -1 to close. */
static int
conn_write_frame (struct conn *c, int fd)
{
  while (c->have < c->len)
    {
      ssize_t w = send (fd, c->buf + c->have, c->len - c->have, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
      if (w <= 0)
        return -1;
      c->have += (size_t) w;
    }
  return 1;
}

/* Put SSH_AGENT_FAILURE in c->buf (which holds at least a 5-byte frame)
 * for the step. */
static void
conn_fail (struct conn *c)
{
  memcpy (c->buf, ib_agent_failure_frame, sizeof ib_agent_failure_frame);
  c->len = sizeof ib_agent_failure_frame;
}

/* Move connection `c` on as far as its sockets allow: 0 to wait for poll
 * (conn_events), -1 to close it. */
static int
conn_run (struct conn *c)
{
  for (;;)
    {
      int r;
      switch (c->state)
        {
        case READ_REQUEST:
          if ((r = conn_read_frame (c, c->fd[0])) <= 0)
            return r;
          c->request = c->buf[4];
          if (ib_agent_filter_request (c->buf + 4, c->len - 4) == IB_AGENT_FORWARD)
            c->state = TO_AGENT;
          else
            {
              ib_debug ("ssh: a step's agent request of type %u refused (the forwarded agent "
                        "is read-only)",
                        (unsigned) c->request);
              conn_fail (c);
              c->state = TO_STEP;
            }
          c->have = 0;
          break;
        case TO_AGENT:
          if ((r = conn_write_frame (c, c->fd[1])) <= 0)
            return r;
          c->have = 0;
          c->state = READ_REPLY;
          break;
        case READ_REPLY:
          if ((r = conn_read_frame (c, c->fd[1])) <= 0)
            return r;
          if (!ib_agent_reply_fits (c->request, c->buf + 4, c->len - 4))
            {
              ib_debug ("ssh: the agent answered a request of type %u with type %u: "
                        "SSH_AGENT_FAILURE sent instead",
                        (unsigned) c->request, (unsigned) c->buf[4]);
              conn_fail (c);
            }
          c->have = 0;
          c->state = TO_STEP;
          break;
        case TO_STEP:
          if ((r = conn_write_frame (c, c->fd[0])) <= 0)
            return r;
          c->have = c->len = 0;
          c->state = READ_REQUEST;
          break;
        }
    }
}

/* What to poll each side of `c` for in its state: the side it waits on
 * for POLLIN or POLLOUT, the other for nothing (its POLLHUP and POLLERR,
 * which poll reports regardless, end the connection). */
static void
conn_events (const struct conn *c, short ev[2])
{
  ev[0] = c->state == READ_REQUEST ? POLLIN : c->state == TO_STEP ? POLLOUT : 0;
  ev[1] = c->state == READ_REPLY ? POLLIN : c->state == TO_AGENT ? POLLOUT : 0;
}

static void
conn_close (struct conn *c)
{
  close (c->fd[0]);
  close (c->fd[1]);
  if (c->buf)
    explicit_bzero (c->buf, c->cap);
  free (c->buf);
  memset (c, 0, sizeof *c);
}

/* Connections a step may hold open at once, all its ssh mounts together:
 * each costs imgbuild two descriptors and up to two frames of
 * IB_AGENT_MSG_MAX, so a step that opens connections in a loop would
 * otherwise take imgbuild's descriptors.  An ssh client holds one. */
#define RELAY_CONNS_MAX 64

/* Accept a step's connection on listening socket `i` and connect to its
 * agent: a new entry of *conns, or nothing when either fails or the step
 * holds RELAY_CONNS_MAX already (the new one is closed at once). */
static void
relay_accept (ib_secret_run_t *r, size_t i, struct conn **conns, size_t *n_conns)
{
  int c = accept4 (r->listen[i], NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (c < 0)
    return;
  if (*n_conns >= RELAY_CONNS_MAX)
    {
      ib_debug ("ssh: a step holds %d agent connections already: another one closed",
                RELAY_CONNS_MAX);
      close (c);
      return;
    }
  int ag = agent_connect (r->agents[i]);
  if (ag < 0)
    {
      close (c);
      return;
    }
  *conns = xrealloc (*conns, sizeof **conns * (*n_conns + 1));
  (*conns)[(*n_conns)++] = (struct conn){ .fd = { c, ag }, .state = READ_REQUEST };
}

static void *
relay_main (void *arg)
{
  ib_secret_run_t *r = arg;
  struct conn *conns = NULL;
  size_t n_conns = 0;
  struct pollfd *pfd = NULL;
  for (;;)
    {
      size_t first = 1 + r->n_listen, n = first + 2 * n_conns;
      pfd = xrealloc (pfd, sizeof *pfd * n);
      pfd[0] = (struct pollfd){ .fd = r->stop[0], .events = POLLIN };
      for (size_t i = 0; i < r->n_listen; i++)
        pfd[1 + i] = (struct pollfd){ .fd = r->listen[i], .events = POLLIN };
      for (size_t k = 0; k < n_conns; k++)
        {
          short ev[2];
          conn_events (&conns[k], ev);
          for (int side = 0; side < 2; side++)
            pfd[first + 2 * k + side] = (struct pollfd){ .fd = conns[k].fd[side],
                                                         .events = ev[side] };
        }
      if (poll (pfd, n, -1) < 0)
        {
          if (errno == EINTR)
            continue;
          break;
        }
      if (pfd[0].revents)
        break;
      /* the connections polled, from the last (closing one moves the last
       * into its place), before new ones are added */
      for (size_t k = (n - first) / 2; k-- > 0;)
        {
          struct conn *c = &conns[k];
          short ev[2];
          conn_events (c, ev);
          bool idle_side_hup = false, ready = false;
          for (int side = 0; side < 2; side++)
            {
              short re = pfd[first + 2 * k + side].revents;
              if (ev[side] == 0 && (re & (POLLHUP | POLLERR | POLLNVAL)))
                idle_side_hup = true;
              else if (re)
                ready = true;
            }
          if (idle_side_hup || (ready && conn_run (c) < 0))
            {
              conn_close (c);
              conns[k] = conns[--n_conns];
            }
        }
      for (size_t i = 0; i < r->n_listen; i++)
        if (pfd[1 + i].revents & POLLIN)
          relay_accept (r, i, &conns, &n_conns);
    }
  for (size_t k = 0; k < n_conns; k++)
    conn_close (&conns[k]);
  free (conns);
  free (pfd);
  return NULL;
}

int
ib_secret_run_start (ib_secret_run_t *r, ib_error_t *err)
{
  if (r == NULL || r->n_listen == 0 || r->running)
    return 0;
  if (pipe2 (r->stop, O_CLOEXEC) < 0)
    return ib_error_sys (err, errno, "ssh: relay");
  int e = pthread_create (&r->thread, NULL, relay_main, r);
  if (e)
    return ib_error_sys (err, e, "ssh: start the agent relay");
  r->running = true;
  return 0;
}

void
ib_secret_run_end (ib_secret_run_t **run)
{
  ib_secret_run_t *r = *run;
  if (r == NULL)
    return;
  if (r->running)
    {
      ssize_t w;
      do
        w = write (r->stop[1], "x", 1);
      while (w < 0 && errno == EINTR);
      pthread_join (r->thread, NULL);
    }
  for (int i = 0; i < 2; i++)
    if (r->stop[i] >= 0)
      close (r->stop[i]);
  for (size_t i = 0; i < r->n_listen; i++)
    close (r->listen[i]);
  free (r->listen);
  ib_strv_free (r->agents);
  /* Files on a disk (no tmpfs): overwritten before they go, for what that
   * is worth on a file system that may keep old blocks. */
  for (char **p = r->paths; !r->mounted && p && *p; p++)
    {
      struct stat st;
      int fd = open (*p, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0 && fstat (fd, &st) == 0 && S_ISREG (st.st_mode) && st.st_size > 0)
        {
          static const char zeros[4096];
          for (off_t off = 0; off < st.st_size; off += (off_t) sizeof zeros)
            if (write (fd, zeros, sizeof zeros) < 0)
              break;
        }
      if (fd >= 0)
        close (fd);
    }
  ib_strv_free (r->paths);
  if (r->mounted && umount2 (r->dir, MNT_DETACH) < 0)
    ib_warn ("secrets: unmount %s: %s", r->dir, strerror (errno));
  ib_error_t e = NULL;
  if (ib_rm_rf (r->dir, &e) < 0)
    {
      ib_warn ("secrets: %s", e->msg);
      ib_error_free (&e);
    }
  free (r->dir);
  free (r);
  *run = NULL;
}
