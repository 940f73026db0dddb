/* rootfs/console.c — the sandbox's own pty, passed to imgbuild and
 * relayed (console.h says why). */
#include "rootfs/console.h"
#include "rootfs/rootfs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO ('T', 0x41)
#endif

int
ib_console_open (int *master, int *slave, const struct winsize *ws, ib_error_t *err)
{
  *master = *slave = -1;
  int m = open ("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0)
    return ib_error_sys (err, errno, "open a terminal: /dev/ptmx");
  if (unlockpt (m) < 0)
    {
      int e = errno;
      close (m);
      return ib_error_sys (err, e, "open a terminal: unlock /dev/ptmx");
    }
  /* The peer through the master itself (Linux 4.13), not by a path that
   * could name another instance's pty; by name where the kernel lacks it. */
  int s = ioctl (m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (s < 0)
    {
      char name[64];
      if (ptsname_r (m, name, sizeof name) == 0)
        s = open (name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    }
  if (s < 0)
    {
      int e = errno;
      close (m);
      return ib_error_sys (err, e, "open a terminal: the other end of /dev/ptmx");
    }
  if (ws && ws->ws_row && ws->ws_col)
    ioctl (m, TIOCSWINSZ, ws);
  *master = m;
  *slave = s;
  return 0;
}

int
ib_console_send (int sock, int fd, ib_error_t *err)
{
  char byte = 'T';
  struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
  union
  {
    char buf[CMSG_SPACE (sizeof (int))];
    struct cmsghdr align;
  } u;
  memset (&u, 0, sizeof u);
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf };
  struct cmsghdr *c = CMSG_FIRSTHDR (&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN (sizeof (int));
  memcpy (CMSG_DATA (c), &fd, sizeof fd);
  while (sendmsg (sock, &msg, MSG_NOSIGNAL) < 0)
    if (errno != EINTR)
      return ib_error_sys (err, errno, "pass the terminal to imgbuild");
  return 0;
}

int
ib_console_recv (int sock, int *fd, ib_error_t *err)
{
  *fd = -1;
  char byte;
  struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
  union
  {
    char buf[CMSG_SPACE (sizeof (int))];
    struct cmsghdr align;
  } u;
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf };
  ssize_t n;
  while ((n = recvmsg (sock, &msg, MSG_CMSG_CLOEXEC)) < 0)
    if (errno != EINTR)
      return ib_error_sys (err, errno, "receive the sandbox's terminal");
  if (n == 0)
    return 0;
  struct cmsghdr *c = CMSG_FIRSTHDR (&msg);
  if (c == NULL || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS
      || c->cmsg_len != CMSG_LEN (sizeof (int)) || (msg.msg_flags & MSG_CTRUNC))
    return ib_error_set (err, EPROTO, "receive the sandbox's terminal: no descriptor came");
  memcpy (fd, CMSG_DATA (c), sizeof *fd);
  return 0;
}

/* SIGWINCH, turned into a byte on a pipe the relay polls. */
static int winch_w = -1;

static void
winch_handler (int sig)
{
  (void) sig;
  int saved = errno;
  if (winch_w >= 0 && write (winch_w, "w", 1) < 0)
    {
      /* full: a resize is pending already */
    }
  errno = saved;
}

static void
pass_winsize (int from1, int from2, int master)
{
  struct winsize ws;
  if (ioctl (from1, TIOCGWINSZ, &ws) == 0 || ioctl (from2, TIOCGWINSZ, &ws) == 0)
    ioctl (master, TIOCSWINSZ, &ws);
}

/* One read of the sandbox's error pipe into *errmsg; at its end (or on an
 * error) the pipe is closed and *err_r set to -1. */
static void
read_err_pipe (int *err_r, ib_buf_t *errmsg)
{
  char buf[4096];
  ssize_t k = read (*err_r, buf, sizeof buf);
  if (k > 0)
    ib_buf_append (errmsg, buf, (size_t) k);
  else if (k == 0 || errno != EINTR)
    {
      close (*err_r);
      *err_r = -1;
    }
}

void
ib_console_relay (int master, int in_fd, int out_fd, int err_r, ib_buf_t *errmsg)
{
  struct termios saved;
  bool raw = false;
  if (isatty (in_fd) && tcgetattr (in_fd, &saved) == 0)
    {
      struct termios t = saved;
      cfmakeraw (&t);
      raw = tcsetattr (in_fd, TCSANOW, &t) == 0;
    }
  int wp[2] = { -1, -1 };
  struct sigaction old_winch;
  bool winch = pipe2 (wp, O_CLOEXEC | O_NONBLOCK) == 0;
  if (winch)
    {
      winch_w = wp[1];
      struct sigaction sa = { 0 };
      sa.sa_handler = winch_handler;
      sigemptyset (&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      sigaction (SIGWINCH, &sa, &old_winch);
    }
  pass_winsize (out_fd, in_fd, master);

  char buf[16384];
  bool in_open = true;
  for (;;)
    {
      struct pollfd fds[4];
      nfds_t n = 0;
      fds[n++] = (struct pollfd){ .fd = master, .events = POLLIN };
      int i_in = -1, i_err = -1, i_winch = -1;
      if (in_open)
        {
          i_in = (int) n;
          fds[n++] = (struct pollfd){ .fd = in_fd, .events = POLLIN };
        }
      if (err_r >= 0)
        {
          i_err = (int) n;
          fds[n++] = (struct pollfd){ .fd = err_r, .events = POLLIN };
        }
      if (winch)
        {
          i_winch = (int) n;
          fds[n++] = (struct pollfd){ .fd = wp[0], .events = POLLIN };
        }
      if (poll (fds, n, -1) < 0)
        {
          if (errno == EINTR)
            continue;
          break;
        }
      if (fds[0].revents)
        {
          ssize_t k = read (master, buf, sizeof buf);
          if (k < 0 && errno == EINTR)
            continue;
          if (k <= 0) /* EIO: the command's side is closed */
            break;
          if (!rfs_write_full (out_fd, buf, (size_t) k))
            break;
        }
      if (i_in >= 0 && fds[i_in].revents)
        {
          ssize_t k = read (in_fd, buf, sizeof buf);
          if (k < 0 && errno == EINTR)
            continue;
          if (k <= 0)
            {
              /* our input ended: the command reads end of file once */
              in_open = false;
              struct termios t;
              char eof = tcgetattr (master, &t) == 0 ? (char) t.c_cc[VEOF] : '\004';
              rfs_write_full (master, &eof, 1);
            }
          else
            rfs_write_full (master, buf, (size_t) k);
        }
      if (i_err >= 0 && fds[i_err].revents)
        {
          read_err_pipe (&err_r, errmsg);
        }
      if (i_winch >= 0 && fds[i_winch].revents)
        {
          while (read (wp[0], buf, sizeof buf) > 0)
            ;
          pass_winsize (out_fd, in_fd, master);
        }
    }
  close (master);
  /* the rest of a failure message, if the sandbox is still writing one */
  while (err_r >= 0)
    read_err_pipe (&err_r, errmsg);
  if (winch)
    {
      sigaction (SIGWINCH, &old_winch, NULL);
      winch_w = -1;
      close (wp[0]);
      close (wp[1]);
    }
  if (raw)
    tcsetattr (in_fd, TCSADRAIN, &saved);
}
