/* The image commands: pull, push, inspect, images, unpack, prune; and the
 * image rootfs that unpack and run share. */
#include "builder/cli/cli.h"
#include "builder/engine/prune.h"
#include "oci/regconf.h"
#include "common/util.h"
#include "oci/auth.h"
#include "oci/registry.h"
#include "oci/shortname.h"
#include "rootfs/overlay.h"
#include "rootfs/prepare.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* `dest` := the rootfs of image `name`, pulled (and unpacked while it
 * downloads) when the store lacks it; `snapshot`: record the result as the
 * image's snapshot for later runs and builds (run does; unpack, an export,
 * does not). */
int
image_rootfs (ib_store_t *store, const char *name_given, const char *dest, bool snapshot,
              json_t **config_out, ib_error_t *err)
{
  cleanup_free char *name = NULL; /* a short name resolved (oci/shortname.h) */
  if (ib_short_name_choose (store, name_given, NULL, NULL, NULL, NULL, NULL, &name, err) < 0)
    return -1;
  ib_descriptor_t desc = { 0 };
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  bool pulled = false;
  if (ib_store_resolve (store, name, &desc, err) < 0)
    {
      /* a digest (a manifest's or an image ID) names a stored image only */
      if (ib_digest_valid (name))
        return -1;
      /* not stored: pull it, unpacking each layer while it downloads */
      ib_error_free (err);
      if (ib_rootfs_pull (store, name, NULL, NULL, NULL, dest, snapshot, err) < 0)
        return -1;
      pulled = true;
    }
  ib_descriptor_clear (&desc);
  if (ib_store_load_image (store, name, &desc, &m, &config, err) < 0)
    return -1;
  cleanup_strv char **diff_ids = NULL;
  cleanup_strv char **digests = NULL;
  int ret = ib_config_diff_ids (config, &diff_ids, err);
  for (size_t i = 0; ret == 0 && i < m->n_layers; i++)
    ib_strv_push (&digests, m->layers[i].digest);
  if (ret == 0 && !pulled)
    ret = ib_rootfs_prepare (store, digests, diff_ids, dest, snapshot, err);
  ib_descriptor_clear (&desc);
  ib_manifest_free (m);
  if (ret == 0 && config_out)
    *config_out = config;
  else
    json_decref (config);
  return ret;
}

/* --creds USER:PASSWORD for the registry of `ref_string` (skopeo's option). */
static int
set_creds (const char *cmd, const char *creds, const char *ref_string, ib_error_t *err)
{
  const char *colon = strchr (creds, ':');
  if (colon == NULL || colon == creds)
    {
      fprintf (stderr, "imgbuild: %s: --creds takes USER:PASSWORD\nTry 'imgbuild --help'.\n", cmd);
      exit (2);
    }
  ib_ref_t ref;
  if (ib_ref_parse (ref_string, &ref, err) < 0)
    return ib_error_prefix (err, "%s", cmd);
  cleanup_free char *user = xstrndup (creds, (size_t) (colon - creds));
  ib_auth_set_override (ref.registry, user, colon + 1);
  ib_ref_free (&ref);
  return 0;
}

/* pull --unpack: the stored image `name`'s tree made once, so that it
 * stays as a snapshot (what FROM, run and unpack start from), then the
 * tree itself removed: what podman's and buildah's pull leave. */
static int
pull_unpack (ib_store_t *store, const char *name, ib_error_t *err)
{
  cleanup_free char *tmp = NULL;
  if (ib_store_tmp_dir (store, "pull", &tmp, err) < 0)
    return ib_error_prefix (err, "pull --unpack %s", name);
  rmdir (tmp);
  ib_rootfs_allow_overlay (true); /* the tree: an overlay on the snapshot, unmounted below */
  int r = image_rootfs (store, name, tmp, true, NULL, err);
  ib_error_t e = NULL;
  if (ib_rootfs_remove (tmp, &e) < 0)
    {
      if (r == 0)
        {
          *err = e;
          r = -1;
        }
      else
        ib_error_free (&e);
    }
  return r < 0 ? ib_error_prefix (err, "pull --unpack %s", name) : 0;
}

int
cmd_pull (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = { { "platform", required_argument, NULL, 'p' },
                                        { "creds", required_argument, NULL, 'c' },
                                        { "unpack", no_argument, NULL, 'u' },
                                        REGISTRY_OPTIONS, GLOBAL_OPTIONS, { NULL, 0, NULL, 0 } };
  cleanup_free char *os = NULL, *arch = NULL, *variant = NULL;
  const char *creds = NULL;
  bool unpack = false;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "q", opts, NULL)) != -1)
    {
      if (c == '?')
        exit (2);
      if (registry_option (c, optarg) || global_option (c, optarg, "pull"))
        continue;
      if (c == 'c')
        {
          creds = optarg;
          continue;
        }
      if (c == 'u')
        {
          unpack = true;
          continue;
        }
      free (os), free (arch), free (variant);
      os = arch = variant = NULL;
      if (c != 'p' || ib_platform_parse (optarg, &os, &arch, &variant, NULL) < 0)
        {
          usage_error ("pull: --platform takes OS/ARCH[/VARIANT], got '%s'", optarg ? optarg : "");
        }
    }
  if (argc - optind != 1)
    usage_error ("%s", "pull: expected one image reference");
  /* skopeo's transports: an archive or layout is loaded (imgbuild load) */
  cleanup_free char *src = NULL, *name = NULL;
  transport_t t = transport_parse (argv[optind], &src, &name);
  if (t != TRANSPORT_NONE && t != TRANSPORT_REGISTRY)
    {
      if (unpack)
        usage_error ("pull: --unpack takes a registry image, not '%s'", argv[optind]);
      ib_store_t *store = NULL;
      if (open_store (&store, err) < 0)
        return -1;
      int r = load_archive (store, src, name, err);
      ib_store_close (store);
      return r < 0 ? ib_error_prefix (err, "pull") : 0;
    }
  ib_store_t *store = NULL;
  /* --unpack writes a tree: the user namespace first, as build and run */
  if ((unpack && enter_userns (err) < 0) || open_store (&store, err) < 0)
    return -1;
  /* a short name: an alias, or the search registries (oci/shortname.h) */
  cleanup_free char *chosen = NULL;
  int r = ib_short_name_choose (store, src, os, arch, variant, NULL, NULL, &chosen, err);
  if (r == 0 && creds)
    r = set_creds ("pull", creds, chosen, err);
  if (r < 0)
    {
      ib_store_close (store);
      return -1;
    }
  ib_descriptor_t d = { 0 };
  r = ib_pull (store, chosen, os, arch, variant, &d, err);
  if (r == 0 && unpack)
    r = pull_unpack (store, chosen, err);
  if (r == 0)
    printf ("%s\n", d.digest);
  ib_descriptor_clear (&d);
  ib_store_close (store);
  return r;
}

int
cmd_push (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = { { "tag", required_argument, NULL, 't' },
                                        { "creds", required_argument, NULL, 'c' },
                                        REGISTRY_OPTIONS, GLOBAL_OPTIONS, { NULL, 0, NULL, 0 } };
  cleanup_strv char **tags = NULL, **dsts = NULL;
  const char *creds = NULL;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "t:q", opts, NULL)) != -1)
    {
      if (c == 't')
        ib_strv_push (&tags, optarg);
      else if (c == 'c')
        creds = optarg;
      else if (!registry_option (c, optarg) && !global_option (c, optarg, "push"))
        exit (2);
    }
  if (argc - optind < 2)
    usage_error ("%s", "push: expected SRC DST [DST...]");
  for (int i = optind + 1; i < argc; i++)
    ib_strv_push (&dsts, argv[i]);
  /* -t TAG: DST's repository with another tag; -t REF (with a '/'): another reference */
  for (char **t = tags; t && *t; t++)
    {
      if (strchr (*t, '/'))
        {
          ib_strv_push (&dsts, *t);
          continue;
        }
      ib_ref_t ref;
      if (ib_ref_parse (argv[optind + 1], &ref, err) < 0)
        return ib_error_prefix (err, "push");
      cleanup_free char *full = xasprintf ("%s/%s:%s", ref.registry, ref.repository, *t);
      ib_ref_free (&ref);
      ib_strv_push (&dsts, full);
    }
  /* skopeo's transports: an archive or layout is written (imgbuild save);
   * docker://REF is REF */
  cleanup_strv char **refs = NULL, **archives = NULL;
  for (char **d = dsts; d && *d; d++)
    {
      cleanup_free char *path = NULL, *name = NULL;
      transport_t t = transport_parse (*d, &path, &name);
      if (t == TRANSPORT_NONE || t == TRANSPORT_REGISTRY)
        ib_strv_push (&refs, path);
      else
        ib_strv_push (&archives, *d);
    }
  for (char **d = refs; creds && d && *d; d++)
    if (set_creds ("push", creds, *d, err) < 0)
      return -1;
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  int r = 0;
  for (char **a = archives; r == 0 && a && *a; a++)
    {
      cleanup_free char *path = NULL, *name = NULL;
      transport_t t = transport_parse (*a, &path, &name);
      r = save_archive (store, argv[optind], t, path, name, err);
      if (r == 0)
        printf ("%s\n", *a);
    }
  if (r == 0 && refs)
    r = ib_push_refs (store, argv[optind], refs, err);
  ib_store_close (store);
  return r;
}

int
cmd_unpack (int argc, char **argv, ib_error_t *err)
{
  int i = command_operands (argc, argv, "unpack");
  if (argc - i != 2)
    usage_error ("%s", "unpack: expected REF DIR");
  struct stat st;
  if (lstat (argv[i + 1], &st) == 0)
    return ib_error_set (err, EEXIST, "unpack: %s already exists", argv[i + 1]);
  ib_store_t *store = NULL;
  if (enter_userns (err) < 0 || open_store (&store, err) < 0)
    return -1;
  int r = image_rootfs (store, argv[i], argv[i + 1], false, NULL, err);
  ib_store_close (store);
  return r;
}

int
cmd_inspect (int argc, char **argv, ib_error_t *err)
{
  int i = command_operands (argc, argv, "inspect");
  if (argc - i != 1)
    usage_error ("%s", "inspect: expected REF");
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  ib_descriptor_t d = { 0 }, served = { 0 }, stored = { 0 };
  char index_digest[IB_DIGEST_LEN];
  int r = -1;
  char *mdata = NULL, *cdata = NULL;
  size_t mlen = 0, clen = 0;
  ib_manifest_t *m = NULL;
  if (ib_store_resolve_served (store, argv[i], &served, &stored, index_digest, err) < 0
      || ib_store_load_image (store, argv[i], &d, &m, NULL, err) < 0
      || ib_store_read_blob (store, m->config.digest, &cdata, &clen, err) < 0)
    goto out;
  /* a pulled image as its registry served it; else the manifest the tag
   * points at (an index's: the host platform's) */
  const ib_descriptor_t *shown = strcmp (served.digest, stored.digest) != 0 ? &served : &d;
  if (ib_store_read_blob (store, shown->digest, &mdata, &mlen, err) < 0)
    goto out;
  {
    json_t *jm = json_loadb (mdata, mlen, 0, NULL), *jc = json_loadb (cdata, clen, 0, NULL);
    json_t *o = json_pack ("{s:s, s:s, s:o, s:o}", "digest", shown->digest, "stored_digest",
                           d.digest, "manifest", jm, "config", jc);
    if (index_digest[0])
      json_object_set_new (o, "index_digest", json_string (index_digest));
    json_dumpf (o, stdout, JSON_INDENT (2) | JSON_PRESERVE_ORDER);
    printf ("\n");
    json_decref (o);
  }
  r = 0;
out:
  free (mdata);
  free (cdata);
  ib_manifest_free (m);
  ib_descriptor_clear (&d);
  ib_descriptor_clear (&served);
  ib_descriptor_clear (&stored);
  ib_store_close (store);
  return r;
}

int
cmd_prune (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "cache", no_argument, NULL, 'c' },
    { "all", no_argument, NULL, 'a' },
    { "keep-storage", required_argument, NULL, 'K' },
    GLOBAL_OPTIONS,
    { NULL, 0, NULL, 0 },
  };
  ib_prune_opts_t po = { 0 };
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "aq", opts, NULL)) != -1)
    switch (c)
      {
      case 'c': po.cache = true; break;
      case 'a': po.all = true; break;
      case 'K':
        {
          ib_error_t e = NULL;
          if (ib_parse_size (optarg, &po.keep_storage, &e) < 0)
            usage_error ("prune: --keep-storage: %s", e->msg);
          po.keep_storage_set = true;
          break;
        }
      default:
        if (!global_option (c, optarg, "prune"))
          exit (2);
      }
  if (optind < argc)
    usage_error ("prune: unexpected argument '%s'", argv[optind]);
  if (po.keep_storage_set && (po.cache || po.all))
    usage_error ("prune: --keep-storage keeps part of the build cache; %s removes all of it",
                 po.all ? "--all" : "--cache");
  /* Files of map-mode builds belong to subordinate ids: remove them from
   * inside the user namespace, as the build made them. */
  if (enter_userns (err) < 0)
    return -1;
  cleanup_free char *def = cli_store_dir ? NULL : ib_store_default_root ();
  ib_store_t *store = NULL;
  if (ib_store_open (cli_store_dir ? cli_store_dir : def, &store, err) < 0)
    return -1;
  if (ib_store_gc_lock (store, true, false, NULL) < 0)
    {
      ib_info ("prune: waiting for the builds, pulls and runs using %s to end", store->root);
      if (ib_store_gc_lock (store, true, true, err) < 0)
        {
          ib_store_close (store);
          return -1;
        }
    }
  ib_prune_result_t res;
  int r = ib_prune (store, &po, &res, err);
  char a[24], b[24], cc[24], d[24], t[24];
  ib_human_size (res.tmp_bytes, a);
  ib_human_size (res.cache_bytes, b);
  ib_human_size (res.snapshot_bytes, cc);
  ib_human_size (res.blob_bytes, d);
  ib_human_size (res.tmp_bytes + res.cache_bytes + res.snapshot_bytes + res.blob_bytes, t);
  printf ("temporary files:      %zu removed, %s\n", res.tmp_entries, a);
  printf ("build cache:          %zu step records, %zu cache mounts removed, %s\n",
          res.cache_records, res.cache_mounts, b);
  printf ("snapshots:            %zu removed, %s\n", res.snapshots, cc);
  printf ("unreferenced blobs:   %zu removed, %s\n", res.blobs, d);
  printf ("Total reclaimed space: %s\n", t);
  if (po.keep_storage_set && r == 0)
    {
      char k[24], bud[24];
      int64_t budget = po.keep_storage > INT64_MAX ? INT64_MAX : (int64_t) po.keep_storage;
      ib_human_size (res.kept_bytes, k);
      ib_human_size (budget, bud);
      printf ("Store after prune:     %s (--keep-storage %s%s)\n", k, bud,
              res.kept_bytes > budget ? ": tagged images hold more" : "");
    }
  ib_store_close (store);
  return r;
}

int
cmd_images (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "noheading", no_argument, NULL, 'n' }, GLOBAL_OPTIONS, { NULL, 0, NULL, 0 },
  };
  bool heading = true; /* -n, --noheading: podman's, for scripts and completion */
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "nq", opts, NULL)) != -1)
    if (c == 'n')
      heading = false;
    else if (!global_option (c, optarg, "images"))
      exit (2);
  if (optind != argc)
    usage_error ("%s", "images: takes no arguments");
  if (heading)
    printf ("%-60s %-19s %-16s %10s\n", "NAME", "DIGEST", "PLATFORM", "SIZE");
  if (!store_exists ())
    return 0; /* nothing stored; completion's listing does not make a store */
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  json_t *list = NULL;
  if (ib_store_list (store, &list, err) < 0)
    {
      ib_store_close (store);
      return -1;
    }
  size_t i;
  json_t *e;
  json_array_foreach (list, i, e)
  {
    const char *name = json_string_value (
        json_object_get (json_object_get (e, "annotations"), "org.opencontainers.image.ref.name"));
    const char *digest = json_string_value (json_object_get (e, "digest"));
    if (digest == NULL)
      continue;
    ib_manifest_t *m = NULL;
    ib_descriptor_t d = { 0 };
    json_t *config = NULL;
    double size = 0;
    cleanup_free char *platform = NULL;
    if (ib_store_load_image (store, digest, &d, &m, &config, NULL) == 0)
      {
        size = (double) m->config.size;
        for (size_t k = 0; k < m->n_layers; k++)
          size += (double) m->layers[k].size;
        const char *os = json_string_value (json_object_get (config, "os"));
        const char *arch = json_string_value (json_object_get (config, "architecture"));
        if (os && arch)
          platform = ib_platform_string (
              os, arch, json_string_value (json_object_get (config, "variant")));
      }
    ib_manifest_free (m);
    ib_descriptor_clear (&d);
    if (config)
      json_decref (config);
    /* a pulled image's digest as its registry served it */
    const char *served = json_string_value (json_object_get (
        json_object_get (e, "annotations"), IB_REGISTRY_DIGEST_ANNOTATION));
    if (served && (!ib_digest_valid (served) || !ib_store_has_blob (store, served)))
      served = NULL; /* as ib_store_resolve_served: the bytes are needed */
    printf ("%-60s %.19s %-16s %8.1fMB\n", name ? name : "<none>", served ? served : digest,
            platform ? platform : "-", size / 1e6);
  }
  json_decref (list);
  ib_store_close (store);
  return 0;
}
