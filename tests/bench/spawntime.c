/* tests/bench/spawntime.c — run a command N times (posix_spawn, wait),
 * its output to /dev/null, and print each run's wall time in
 * microseconds, one per line: a timer that adds no interpreter's fork to
 * what it measures (startup.sh).  Exit 1 when a run fails.
 *
 *   spawntime N COMMAND [ARG]... */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int
main (int argc, char **argv)
{
  if (argc < 3)
    {
      fprintf (stderr, "usage: spawntime N COMMAND [ARG]...\n");
      return 2;
    }
  int n = atoi (argv[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init (&fa);
  posix_spawn_file_actions_addopen (&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen (&fa, 2, "/dev/null", O_WRONLY, 0);
  for (int i = 0; i < n; i++)
    {
      struct timespec t0, t1;
      pid_t pid;
      int status;
      clock_gettime (CLOCK_MONOTONIC, &t0);
      if (posix_spawnp (&pid, argv[2], &fa, NULL, argv + 2, environ) != 0
          || waitpid (pid, &status, 0) != pid)
        return 1;
      clock_gettime (CLOCK_MONOTONIC, &t1);
      if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
        {
          fprintf (stderr, "spawntime: %s: exit status %d\n", argv[2], status);
          return 1;
        }
      printf ("%.1f\n", (double) (t1.tv_sec - t0.tv_sec) * 1e6
                          + (double) (t1.tv_nsec - t0.tv_nsec) / 1e3);
    }
  return 0;
}
