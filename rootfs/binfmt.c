/* rootfs/binfmt.c — can this host run another platform's binaries
 * (binfmt.h).
 *
 * Reading order: elf_header builds the first bytes of an executable of
 * the platform; read_entry parses one handler file as the kernel prints
 * it (fs/binfmt_misc.c bm_entry_read: "enabled", "interpreter PATH",
 * "flags: PFOC", "offset N", "magic HEX", "mask HEX"); entry_matches is
 * the kernel's check_file; ib_binfmt_check walks the handlers.
 */
#include "rootfs/binfmt.h"
#include "common/util.h"
#include "oci/manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ELF identification of an OCI architecture (the System V gABI's e_ident
 * class and data, and e_machine). */
typedef struct
{
  const char *arch;
  unsigned char elf_class; /* 1: ELFCLASS32, 2: ELFCLASS64 */
  unsigned char data;      /* 1: ELFDATA2LSB, 2: ELFDATA2MSB */
  uint16_t machine;
  const char *qemu;        /* qemu-user's name for it (qemu-NAME) */
} elf_arch_t;

static const elf_arch_t elf_arches[] = {
  { "amd64", 2, 1, 62, "x86_64" },    { "386", 1, 1, 3, "i386" },
  { "arm64", 2, 1, 183, "aarch64" },  { "arm", 1, 1, 40, "arm" },
  { "ppc64le", 2, 1, 21, "ppc64le" }, { "s390x", 2, 2, 22, "s390x" },
  { "riscv64", 2, 1, 243, "riscv64" }, { "mips64le", 2, 1, 8, "mips64el" },
  { "loong64", 2, 1, 258, "loongarch64" },
};

#define HDR_LEN 64

static const elf_arch_t *
find_arch (const char *arch)
{
  for (size_t i = 0; i < sizeof elf_arches / sizeof elf_arches[0]; i++)
    if (strcmp (elf_arches[i].arch, arch) == 0)
      return &elf_arches[i];
  return NULL;
}

/* The first HDR_LEN bytes of an ELF executable (e_type ET_EXEC 2 or ET_DYN
 * 3) of `a`: e_ident, e_type, e_machine, e_version 1, the rest 0. */
static void
elf_header (const elf_arch_t *a, uint16_t type, unsigned char h[HDR_LEN])
{
  memset (h, 0, HDR_LEN);
  memcpy (h, "\177ELF", 4);
  h[4] = a->elf_class;
  h[5] = a->data;
  h[6] = 1; /* EV_CURRENT */
  bool le = a->data == 1;
  h[16] = le ? (unsigned char) type : 0;
  h[17] = le ? 0 : (unsigned char) type;
  h[18] = le ? (unsigned char) (a->machine & 0xff) : (unsigned char) (a->machine >> 8);
  h[19] = le ? (unsigned char) (a->machine >> 8) : (unsigned char) (a->machine & 0xff);
  h[le ? 20 : 23] = 1;
}

typedef struct
{
  bool enabled, magic_type, fix_binary;
  char *interpreter;
  size_t offset, len;
  unsigned char magic[128], mask[128];
} entry_t;

static size_t
parse_hex (const char *s, unsigned char *out, size_t max)
{
  size_t n = 0;
  while (s[0] && s[1] && n < max)
    {
      char b[3] = { s[0], s[1], 0 };
      char *end;
      unsigned long v = strtoul (b, &end, 16);
      if (*end)
        break;
      out[n++] = (unsigned char) v;
      s += 2;
    }
  return n;
}

/* Parse handler file `name` in `dirfd`; false when unreadable. */
static bool
read_entry (int dirfd, const char *name, entry_t *e)
{
  memset (e, 0, sizeof *e);
  int fd = openat (dirfd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char buf[4096];
  ssize_t n = read (fd, buf, sizeof buf - 1);
  close (fd);
  if (n <= 0)
    return false;
  buf[n] = '\0';
  bool have_mask = false;
  char *save = NULL;
  for (char *line = strtok_r (buf, "\n", &save); line; line = strtok_r (NULL, "\n", &save))
    {
      if (strcmp (line, "enabled") == 0)
        e->enabled = true;
      else if (ib_str_has_prefix (line, "interpreter "))
        e->interpreter = xstrdup (line + strlen ("interpreter "));
      else if (ib_str_has_prefix (line, "flags:"))
        e->fix_binary = strchr (line + strlen ("flags:"), 'F') != NULL;
      else if (ib_str_has_prefix (line, "offset "))
        e->offset = (size_t) strtoul (line + strlen ("offset "), NULL, 10);
      else if (ib_str_has_prefix (line, "magic "))
        {
          e->magic_type = true;
          e->len = parse_hex (line + strlen ("magic "), e->magic, sizeof e->magic);
        }
      else if (ib_str_has_prefix (line, "mask "))
        {
          have_mask = true;
          parse_hex (line + strlen ("mask "), e->mask, sizeof e->mask);
        }
    }
  if (!have_mask)
    memset (e->mask, 0xff, sizeof e->mask);
  return true;
}

/* fs/binfmt_misc.c check_file for a magic entry: every byte of the
 * header under the mask equals the magic's. */
static bool
entry_matches (const entry_t *e, const unsigned char h[HDR_LEN])
{
  if (!e->magic_type || e->len == 0 || e->offset + e->len > HDR_LEN)
    return false;
  for (size_t j = 0; j < e->len; j++)
    if ((h[e->offset + j] ^ e->magic[j]) & e->mask[j])
      return false;
  return true;
}

/* Whether `path` exists beneath `rootfs` as the step sees it (symlinks
 * resolved inside it). */
static bool
exists_in_root (const char *rootfs, const char *path)
{
  int root = open (rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0)
    return false;
  struct open_how how = { .flags = O_PATH | O_CLOEXEC,
                          .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
  while (*path == '/')
    path++;
  int fd = (int) syscall (SYS_openat2, root, path, &how, sizeof how);
  bool ok = fd >= 0;
  if (fd < 0 && errno == ENOSYS)
    {
      /* no openat2: the file's own name, unresolved */
      struct stat sb;
      ok = fstatat (root, path, &sb, AT_SYMLINK_NOFOLLOW) == 0;
    }
  if (fd >= 0)
    close (fd);
  close (root);
  return ok;
}

static void
entry_clear (entry_t *e)
{
  free (e->interpreter);
  e->interpreter = NULL;
}

int
ib_binfmt_check (const char *binfmt_dir, const char *os, const char *arch, const char *variant,
                 const char *rootfs, char **handler, ib_error_t *err)
{
  *handler = NULL;
  const char *hos, *harch, *hvar;
  ib_host_platform (&hos, &harch, &hvar);
  if (ib_platform_rank (hos, harch, hvar, os, arch, variant) > 0)
    return 0;
  /* an x86_64 kernel runs i386 binaries (IA32 emulation; the seccomp
   * filter lists the x86 architecture) */
  if (strcmp (os, "linux") == 0 && strcmp (harch, "amd64") == 0 && strcmp (arch, "386") == 0)
    return 0;
  cleanup_free char *plat = ib_platform_string (os, arch, variant);
  cleanup_free char *host = ib_platform_string (hos, harch, hvar);
  const elf_arch_t *a = find_arch (arch);
  if (strcmp (os, "linux") != 0 || a == NULL)
    return ib_error_set (err, ENOTSUP, "cannot run %s binaries on %s: no emulation is known "
                         "for them", plat, host);
  cleanup_free char *status_path = ib_path_join (binfmt_dir, "status");
  cleanup_free char *status = NULL;
  if (ib_read_file_max (status_path, 64, "binfmt_misc status", &status, NULL, NULL) < 0)
    return ib_error_set (err, ENOEXEC, "cannot run %s binaries on %s: binfmt_misc is not "
                         "mounted at %s (mount -t binfmt_misc binfmt_misc %s), and the "
                         "qemu-user handlers need it", plat, host, binfmt_dir, binfmt_dir);
  if (!ib_str_has_prefix (status, "enabled"))
    return ib_error_set (err, ENOEXEC, "cannot run %s binaries on %s: binfmt_misc is disabled "
                         "(%s says %.8s; echo 1 > %s)", plat, host, status_path, status,
                         status_path);
  DIR *d = opendir (binfmt_dir);
  if (d == NULL)
    return ib_error_sys (err, errno, "cannot run %s binaries on %s: %s", plat, host, binfmt_dir);
  unsigned char exec_h[HDR_LEN], dyn_h[HDR_LEN];
  elf_header (a, 2, exec_h);
  elf_header (a, 3, dyn_h);
  cleanup_free char *disabled = NULL, *outside = NULL, *outside_interp = NULL;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    {
      if (de->d_name[0] == '.' || strcmp (de->d_name, "status") == 0
          || strcmp (de->d_name, "register") == 0)
        continue;
      entry_t e;
      if (!read_entry (dirfd (d), de->d_name, &e))
        continue;
      if (!entry_matches (&e, exec_h) && !entry_matches (&e, dyn_h))
        {
          entry_clear (&e);
          continue;
        }
      if (!e.enabled)
        {
          if (disabled == NULL)
            disabled = xstrdup (de->d_name);
        }
      else if (!e.fix_binary && rootfs && e.interpreter
               && !exists_in_root (rootfs, e.interpreter))
        {
          if (outside == NULL)
            {
              outside = xstrdup (de->d_name);
              outside_interp = xstrdup (e.interpreter);
            }
        }
      else
        {
          *handler = xasprintf ("%s (%s)", de->d_name, e.interpreter ? e.interpreter : "?");
          entry_clear (&e);
          closedir (d);
          return 0;
        }
      entry_clear (&e);
    }
  closedir (d);
  if (outside)
    return ib_error_set (err, ENOEXEC, "cannot run %s binaries on %s: the binfmt_misc handler "
                         "%s lacks the F (fix-binary) flag and its interpreter %s is not inside "
                         "the root filesystem (register it with F, as Debian's qemu-user-static "
                         "does, or install the interpreter in the image)", plat, host, outside,
                         outside_interp);
  if (disabled)
    return ib_error_set (err, ENOEXEC, "cannot run %s binaries on %s: the binfmt_misc handler "
                         "%s/%s is disabled (update-binfmts --enable %s, or echo 1 > %s/%s)",
                         plat, host, binfmt_dir, disabled, disabled, binfmt_dir, disabled);
  return ib_error_set (err, ENOEXEC, "cannot run %s binaries on %s: no binfmt_misc handler "
                       "for ELF machine %u (%s) in %s (install Debian's qemu-user-static and "
                       "binfmt-support: they register qemu-%s)", plat, host,
                       (unsigned) a->machine, a->qemu, binfmt_dir, a->qemu);
}
