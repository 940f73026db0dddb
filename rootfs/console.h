/* rootfs/console.h — a terminal of the sandbox's own for interactive runs.
 *
 * A step never gets the caller's terminal: it runs in a session of its own
 * (rootfs/sandbox_proc.c).  An interactive `imgbuild run` (or --debug-shell)
 * gets a new pty instead, as podman's and runc's console socket do: pid 1
 * of the sandbox opens it on the sandbox's devpts instance, makes its
 * other end the command's controlling terminal, and passes the master to
 * imgbuild over a socket (SCM_RIGHTS); imgbuild copies bytes between its
 * own terminal (put in raw mode meanwhile) and the master.  Whatever the
 * command does to its terminal (TIOCSTI, modes, window size) stays inside
 * the sandbox's pty. */
#ifndef IB_ROOTFS_CONSOLE_H
#define IB_ROOTFS_CONSOLE_H

#include "common/error.h"
#include "common/util.h"
#include <sys/ioctl.h>

/* Open a new pty on the devpts mounted at /dev/pts of the calling
 * process's root (call it after pivot_root): *master and *slave get
 * close-on-exec descriptors, owned by the caller; the slave is not made
 * anyone's controlling terminal.  ws (NULL: left as the kernel has it) is
 * the window size to start with.  Errors name /dev/ptmx. */
int ib_console_open (int *master, int *slave, const struct winsize *ws, ib_error_t *err);

/* Pass fd over the AF_UNIX socket `sock` (one byte of data plus the
 * descriptor as SCM_RIGHTS).  The caller keeps its fd. */
int ib_console_send (int sock, int fd, ib_error_t *err);

/* Receive what ib_console_send sent: *fd gets a new close-on-exec
 * descriptor (caller closes), or -1 when the peer closed the socket
 * without sending (the sandbox failed before; its error pipe says why).
 * Fails only on a broken message. */
int ib_console_recv (int sock, int *fd, ib_error_t *err);

/* Copy bytes between our terminal and the pty master until the command's
 * side has closed (every descriptor of the slave is gone: EIO/HUP on the
 * master): in_fd -> master, master -> out_fd.  While it runs, in_fd is in
 * raw mode (restored on return, also on failure) when it is a terminal,
 * and the window size of out_fd (or in_fd) is passed on to the master at
 * the start and on each SIGWINCH.  err_r (-1: none) is read meanwhile into
 * *errmsg until its end of file, so that a failure message of the sandbox
 * is not missed; it is closed.  Takes ownership of master (closed).  End of
 * file on in_fd is passed on as the terminal's EOF character once. */
void ib_console_relay (int master, int in_fd, int out_fd, int err_r, ib_buf_t *errmsg);

#endif
