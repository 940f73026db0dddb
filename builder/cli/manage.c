/* Image management without a build: tag, rmi, save, load, and the
 * archive transports of pull and push (skopeo's names: oci:DIR,
 * oci-archive:FILE, docker-archive:FILE, docker://REF).  Names as docker's
 * and podman's commands take them. */
#include "builder/cli/cli.h"
#include "common/util.h"
#include "oci/export.h"
#include "oci/import.h"
#include "oci/ref.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <string.h>
#include <unistd.h>

transport_t
transport_parse (const char *arg, char **path, char **name)
{
  static const struct
  {
    const char *prefix;
    transport_t t;
  } known[] = { { "oci:", TRANSPORT_OCI_DIR },
                { "oci-archive:", TRANSPORT_OCI_ARCHIVE },
                { "docker-archive:", TRANSPORT_DOCKER_ARCHIVE },
                { "docker://", TRANSPORT_REGISTRY } };
  *path = *name = NULL;
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (ib_str_has_prefix (arg, known[i].prefix))
      {
        const char *rest = arg + strlen (known[i].prefix);
        const char *colon = known[i].t == TRANSPORT_REGISTRY ? NULL : strchr (rest, ':');
        *path = colon ? xstrndup (rest, (size_t) (colon - rest)) : xstrdup (rest);
        *name = colon && colon[1] ? xstrdup (colon + 1) : NULL;
        if (**path == '\0')
          {
            free (*path);
            *path = NULL;
            usage_error ("'%s': the transport needs a path (oci:DIR, oci-archive:FILE, "
                         "docker-archive:FILE)", arg);
          }
        return known[i].t;
      }
  *path = xstrdup (arg);
  return TRANSPORT_NONE;
}

int
load_archive (ib_store_t *store, const char *path, const char *name, ib_error_t *err)
{
  cleanup_strv char **loaded = NULL;
  if (ib_import (store, path, name, &loaded, err) < 0)
    return -1;
  for (char **l = loaded; l && *l; l++)
    printf (ib_digest_valid (*l) ? "Loaded image ID: %s\n" : "Loaded image: %s\n", *l);
  return 0;
}

int
save_archive (ib_store_t *store, const char *image, transport_t t, const char *dest,
              const char *name, ib_error_t *err)
{
  ib_descriptor_t d = { 0 };
  if (ib_store_resolve (store, image, &d, err) < 0)
    return -1;
  /* the name written in the archive: the one given, else the image's own
   * (a digest names none) */
  cleanup_free char *full = NULL;
  ib_ref_t ref;
  if (!name && !ib_digest_valid (image) && ib_ref_parse (image, &ref, NULL) == 0)
    {
      full = ref.digest ? NULL : ib_ref_string (&ref);
      ib_ref_free (&ref);
    }
  const char *n = name ? name : full;
  int r;
  switch (t)
    {
    case TRANSPORT_OCI_DIR: r = ib_export_oci (store, d.digest, n, dest, err); break;
    case TRANSPORT_DOCKER_ARCHIVE: r = ib_export_docker (store, d.digest, n, dest, err); break;
    case TRANSPORT_OCI_ARCHIVE: r = ib_export_oci_archive (store, d.digest, n, dest, err); break;
    default: r = ib_error_set (err, EINVAL, "save %s: not an archive transport", image);
    }
  ib_descriptor_clear (&d);
  return r;
}

/* imgbuild load [-i FILE]: an archive (docker-archive or oci-archive
 * tarball, or an OCI layout directory) into the store; stdin when no -i
 * (spooled to the store's tmp/ first). */
int
cmd_load (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = { { "input", required_argument, NULL, 'i' },
                                        GLOBAL_OPTIONS, { NULL, 0, NULL, 0 } };
  const char *input = NULL;
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "i:q", opts, NULL)) != -1)
    if (c == 'i')
      input = optarg;
    else if (!global_option (c, optarg, "load"))
      exit (2);
  if (optind < argc && input == NULL && argc - optind == 1)
    input = argv[optind++]; /* podman load's FILE operand */
  if (optind != argc)
    usage_error ("%s", "load: expected [-i FILE]");
  if (input == NULL && isatty (STDIN_FILENO))
    usage_error ("%s", "load: give -i FILE, or the archive on stdin");
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  cleanup_free char *spool = NULL;
  int r = 0;
  if (input == NULL)
    {
      int fd = ib_store_tmp_file (store, "load-stdin-", &spool, err);
      r = fd < 0 ? -1 : ib_copy_fd_data_to (STDIN_FILENO, fd, "stdin", spool, err);
      if (fd >= 0)
        close (fd);
    }
  if (r == 0)
    r = load_archive (store, input ? input : spool, NULL, err);
  if (r < 0 && input == NULL)
    ib_error_prefix (err, "(stdin)");
  if (spool)
    unlink (spool);
  ib_store_close (store);
  return r;
}

/* imgbuild save [-o FILE] [--format docker-archive|oci-dir] NAME. */
int
cmd_save (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = { { "output", required_argument, NULL, 'o' },
                                        { "format", required_argument, NULL, 'F' },
                                        GLOBAL_OPTIONS, { NULL, 0, NULL, 0 } };
  const char *output = NULL, *format = "docker-archive";
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "o:q", opts, NULL)) != -1)
    if (c == 'o')
      output = optarg;
    else if (c == 'F')
      format = optarg;
    else if (!global_option (c, optarg, "save"))
      exit (2);
  if (argc - optind != 1)
    usage_error ("%s", "save: expected one image name");
  transport_t t = strcmp (format, "docker-archive") == 0 ? TRANSPORT_DOCKER_ARCHIVE
                  : strcmp (format, "oci-dir") == 0      ? TRANSPORT_OCI_DIR
                  : strcmp (format, "oci-archive") == 0  ? TRANSPORT_OCI_ARCHIVE
                                                         : TRANSPORT_NONE;
  if (t == TRANSPORT_NONE)
    usage_error ("save: --format takes docker-archive, oci-archive or oci-dir, got '%s'", format);
  if (output == NULL && (t == TRANSPORT_OCI_DIR || isatty (STDOUT_FILENO)))
    usage_error ("%s", "save: give -o FILE (stdout is a terminal, or the format is a directory)");
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  cleanup_free char *spool = NULL;
  int r = 0;
  if (output == NULL)
    {
      int fd = ib_store_tmp_file (store, "save-", &spool, err);
      if (fd < 0)
        r = -1;
      else
        close (fd);
    }
  if (r == 0)
    r = save_archive (store, argv[optind], t, output ? output : spool, NULL, err);
  if (r == 0 && spool)
    {
      int fd = open (spool, O_RDONLY | O_CLOEXEC);
      r = fd < 0 ? ib_error_sys (err, errno, "open %s", spool)
                 : ib_copy_fd_data_to (fd, STDOUT_FILENO, spool, "stdout", err);
      if (fd >= 0)
        close (fd);
    }
  if (spool)
    unlink (spool);
  ib_store_close (store);
  return r < 0 ? ib_error_prefix (err, "save") : 0;
}

/* imgbuild tag SOURCE TARGET...: each TARGET (a reference, normalized as
 * ib_ref_parse does) names SOURCE's manifest too. */
int
cmd_tag (int argc, char **argv, ib_error_t *err)
{
  int i = command_operands (argc, argv, "tag");
  if (argc - i < 2)
    usage_error ("%s", "tag: expected SOURCE TARGET [TARGET...]");
  /* every target is checked before anything is tagged */
  cleanup_strv char **targets = NULL;
  for (int k = i + 1; k < argc; k++)
    {
      ib_ref_t ref;
      ib_error_t e = NULL;
      if (ib_ref_parse (argv[k], &ref, &e) < 0)
        {
          cleanup_free char *m = xasprintf ("tag: %s", e->msg);
          ib_error_free (&e);
          usage_error ("%s", m);
        }
      if (ref.digest)
        {
          ib_ref_free (&ref);
          usage_error ("tag: a target names a tag, not a digest: '%s'", argv[k]);
        }
      ib_strv_push (&targets, ib_ref_string (&ref));
      ib_ref_free (&ref);
    }
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  /* a pulled image's new names keep what the registry served (its digest) */
  ib_descriptor_t served = { 0 }, stored = { 0 };
  char index_digest[IB_DIGEST_LEN] = "";
  int r = ib_store_resolve_served (store, argv[i], &served, &stored, index_digest, err);
  bool converted = r == 0 && strcmp (served.digest, stored.digest) != 0;
  ib_tag_meta_t meta = { .served_digest = converted ? served.digest : NULL,
                         .served_media_type = converted ? served.media_type : NULL,
                         .index_digest = index_digest[0] ? index_digest : NULL };
  for (char **t = targets; r == 0 && *t; t++)
    r = ib_store_tag_meta (store, *t, stored.media_type, stored.digest, stored.size, &meta, err);
  ib_descriptor_clear (&served);
  ib_descriptor_clear (&stored);
  ib_store_close (store);
  return r < 0 ? ib_error_prefix (err, "tag") : 0;
}

/* imgbuild rmi NAME...: untag each ("Untagged: NAME" on stdout); a name
 * not found is reported and the others are still removed (docker rmi). */
int
cmd_rmi (int argc, char **argv, ib_error_t *err)
{
  int i = command_operands (argc, argv, "rmi");
  if (argc - i < 1)
    usage_error ("%s", "rmi: expected NAME [NAME...]");
  ib_store_t *store = NULL;
  if (!store_exists ())
    return ib_error_set (err, ENOENT, "rmi: image %s not found: the store does not exist",
                         argv[i]);
  if (open_store (&store, err) < 0)
    return -1;
  int failed = 0;
  for (int k = i; k < argc; k++)
    {
      cleanup_free char *removed = NULL;
      ib_error_t e = NULL;
      if (ib_store_untag (store, argv[k], &removed, &e) < 0)
        {
          ib_error_prefix (&e, "rmi");
          ib_error_report (&e);
          failed++;
          continue;
        }
      printf ("Untagged: %s\n", removed);
    }
  ib_store_close (store);
  if (failed)
    return ib_error_set (err, ENOENT, "rmi: %d of %d images not removed", failed, argc - i);
  return 0;
}
