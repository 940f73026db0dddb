/* builder/engine/from.c — FROM: the stage's base (an image pulled or stored,
 * or an earlier stage), its platform, and the tree made lazily when a step
 * needs it. */
#include "builder/engine/engine.h"
#include <stdlib.h>
#include <sys/stat.h>
#include "oci/digest.h"
#include "oci/registry.h"
#include "oci/shortname.h"
#include "oci/ref.h"
#include "rootfs/overlay.h"
#include "rootfs/prepare.h"
#include "rootfs/treecopy.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

int
stage_index (build_t *b, const char *name)
{
  return stage_index_before (b, name, b->n_stages);
}

int
stage_index_before (build_t *b, const char *name, size_t limit)
{
  for (size_t i = limit < b->n_stages ? limit : b->n_stages; i-- > 0;)
    {
      const ib_stage_t *s = b->stages[i].def;
      if (s->name && strcasecmp (s->name, name) == 0)
        return (int) i;
    }
  return -1;
}

/* An earlier stage named (or numbered) `name`, or NULL. */
stage_state_t *
earlier_stage (build_t *b, stage_state_t *st, const char *name)
{
  int idx = stage_index (b, name);
  if (idx < 0 && *name && strspn (name, "0123456789") == strlen (name))
    idx = atoi (name);
  if (idx < 0 || (size_t) idx >= (size_t) (st - b->stages))
    return NULL;
  return &b->stages[idx];
}

/* Is the stored image's config for a platform that serves os/arch/variant
 * (ib_platform_rank)?  A config that names none (scratch builds of other
 * tools) counts as serving any. */
bool
config_serves (json_t *config, const char *os, const char *arch, const char *variant)
{
  const char *cos = json_string_value (json_object_get (config, "os"));
  const char *carch = json_string_value (json_object_get (config, "architecture"));
  if (cos == NULL || carch == NULL)
    return true;
  return ib_platform_rank (os, arch, variant, cos, carch,
                           json_string_value (json_object_get (config, "variant")))
         > 0;
}

/* FROM an image for os/arch/variant (explicit_platform: from --platform,
 * else the host's): the stored one when its platform serves, else pulled
 * for that platform (which moves the name's tag to it). */
static void
pause_for_pull (void *ud)
{
  prog_pause (ud);
}

/* A pull that failed for want of a network (a CI runner without one, a
 * laptop offline) says what would do without it.  Returns -1. */
static int
offline_hint (const char *image, ib_error_t *err)
{
  if (err == NULL || !ib_registry_error_is_unreachable (*err))
    return -1;
  ib_error_t e = NULL;
  ib_error_set (&e, (*err)->status,
                "%s (no network? the image can come from a mirror in registries.conf "
                "([[registry.mirror]], docs/cli.md), from the store (imgbuild load, imgbuild "
                "pull on a machine with a network), or another FROM through --build-arg when "
                "the recipe takes %s from an ARG)",
                (*err)->msg, image);
  ib_error_free (err);
  *err = e;
  return -1;
}

static int
from_image (build_t *b, stage_state_t *st, const char *image, const char *os, const char *arch,
            const char *variant, bool explicit_platform, ib_error_t *err)
{
  /* a short name means what it means to podman here (oci/shortname.h) */
  cleanup_free char *chosen = NULL;
  if (ib_short_name_choose (b->store, image, explicit_platform ? os : NULL,
                            explicit_platform ? arch : NULL, explicit_platform ? variant : NULL,
                            pause_for_pull, b, &chosen, err)
      < 0)
    return ib_error_prefix (err, "FROM %s", image);
  image = chosen;
  ib_descriptor_t desc = { 0 };
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  bool pulled = false;
  ib_pull_policy_t policy = b->opts->pull;
  /* --pull=always: as if not stored (blobs already there are not fetched again) */
  if ((policy == IB_PULL_ALWAYS ? -1 : ib_store_load_image (b->store, image, &desc, &m, &config, err))
          == 0
      && !config_serves (config, os, arch, variant))
    {
      cleanup_free char *want = ib_platform_string (os, arch, variant);
      if (policy == IB_PULL_NEVER)
        {
          ib_descriptor_clear (&desc);
          ib_manifest_free (m);
          json_decref (config);
          return ib_error_set (err, ENOENT,
                               "FROM %s: the stored image is not for %s, and --pull=never", image,
                               want);
        }
      if (need_userns (b, err) < 0)
        return -1;
      prog_pause (b);
      ib_info ("[%s] FROM %s: the stored image is for another platform; pulling %s",
               st->def->name ? st->def->name : "stage", image, want);
      ib_descriptor_clear (&desc);
      ib_manifest_free (m);
      json_decref (config);
      m = NULL;
      config = NULL;
      if (ib_rootfs_pull (b->store, image, os, arch, variant, st->rootfs, true, err) < 0)
        return offline_hint (image, err);
      if (ib_store_load_image (b->store, image, &desc, &m, &config, err) < 0)
        return -1;
      pulled = true;
    }
  else if (m == NULL)
    {
      /* not stored: pull it, unpacking each layer while it downloads */
      if (policy == IB_PULL_NEVER)
        return ib_error_prefix (err, "FROM %s (--pull=never)", image);
      ib_error_free (err);
      if (need_userns (b, err) < 0)
        return -1;
      prog_pause (b);
      if (ib_rootfs_pull (b->store, image, explicit_platform ? os : NULL,
                          explicit_platform ? arch : NULL, explicit_platform ? variant : NULL,
                          st->rootfs, true, err)
          < 0)
        return offline_hint (image, err);
      if (ib_store_load_image (b->store, image, &desc, &m, &config, err) < 0)
        return -1;
      pulled = true;
    }
  prog_resume (b);
  int ret = -1;
  cleanup_strv char **diff_ids = NULL;
  if (ib_config_diff_ids (config, &diff_ids, err) < 0)
    goto out;
  if (ib_strv_len (diff_ids) != m->n_layers)
    {
      ib_error_set (err, EINVAL, "image %s: config lists %zu diff_ids but the manifest %zu layers",
                    image, ib_strv_len (diff_ids), m->n_layers);
      goto out;
    }
  /* Not pulled: the rootfs is made from the stored layers (snapshot) when
   * a step needs it (ensure_rootfs). */
  st->rootfs_ready = pulled;
  {
    cleanup_free char *plat = ib_platform_string (os, arch, variant);
    cleanup_free char *text = xasprintf ("FROM image %s %s", desc.digest, plat);
    ib_cache_key (NULL, text, st->key);
  }
  st->config = config;
  config = NULL;
  st->layers = xmalloc ((m->n_layers + 1) * sizeof (ib_descriptor_t));
  for (size_t i = 0; i < m->n_layers; i++)
    {
      ib_descriptor_t *d = &st->layers[i];
      const char *mt = m->layers[i].media_type;
      /* Same bytes, OCI name: our manifests are OCI manifests. */
      if (mt && strcmp (mt, IB_MT_DOCKER_LAYER_GZIP) == 0)
        mt = IB_MT_OCI_LAYER_GZIP;
      d->media_type = xstrdup (mt ? mt : IB_MT_OCI_LAYER_GZIP);
      memcpy (d->digest, m->layers[i].digest, IB_DIGEST_LEN);
      d->size = m->layers[i].size;
    }
  st->n_layers = m->n_layers;
  ret = 0;
out:
  ib_descriptor_clear (&desc);
  ib_manifest_free (m);
  json_decref (config);
  return ret;
}

/* FROM <an earlier stage>: its config and layers now; its tree (copied, or
 * made from the layers) when a step needs it. */
static int
from_stage (stage_state_t *st, stage_state_t *src, ib_error_t *err)
{
  (void) err;
  st->config = json_deep_copy (src->config);
  st->layers = xmalloc ((src->n_layers + 1) * sizeof (ib_descriptor_t));
  for (size_t i = 0; i < src->n_layers; i++)
    {
      st->layers[i] = src->layers[i];
      st->layers[i].media_type = xstrdup (src->layers[i].media_type);
      st->layers[i].os = st->layers[i].arch = st->layers[i].variant = NULL;
    }
  st->n_layers = src->n_layers;
  st->foreign = src->foreign ? xstrdup (src->foreign) : NULL;
  st->copy_src = src;
  st->copy_n_layers = src->n_layers;
  cleanup_free char *text = xasprintf ("FROM stage %s", src->key);
  ib_cache_key (NULL, text, st->key);
  return 0;
}

/* Make st->rootfs the tree of st->layers, if not done yet: a copy of the
 * FROM stage's tree when no layer was added since, else the layers
 * unpacked over the longest stored snapshot (ib_rootfs_prepare). */
int
ensure_rootfs (build_t *b, stage_state_t *st, ib_error_t *err)
{
  if (need_userns (b, err) < 0)
    return -1;
  if (st->rootfs_ready)
    return 0;
  if (st->copy_src && st->copy_src->rootfs_ready && st->n_layers == st->copy_n_layers)
    {
      if (rmdir (st->rootfs) < 0 && errno != ENOENT)
        return ib_error_sys (err, errno, "prepare %s", st->rootfs);
      /* an overlay over the FROM stage's finished tree, else a copy */
      int o = ib_rootfs_overlay_from (st->copy_src->rootfs, st->rootfs, err);
      if (o < 0 || (o == 0 && ib_copy_rootfs (st->copy_src->rootfs, st->rootfs, err) < 0))
        return -1;
      st->rootfs_ready = true;
      return 0;
    }
  if (st->n_layers == 0)
    {
      st->rootfs_ready = true; /* FROM scratch: the empty directory */
      return 0;
    }
  if (st->n_pending > 0 && join_layers (b, st, err) < 0)
    return -1;
  cleanup_strv char **diff_ids = NULL;
  cleanup_strv char **digests = NULL;
  if (ib_config_diff_ids (st->config, &diff_ids, err) < 0)
    return -1;
  if (ib_strv_len (diff_ids) != st->n_layers)
    return ib_error_set (err, EINVAL, "config lists %zu diff_ids for %zu layers",
                         ib_strv_len (diff_ids), st->n_layers);
  for (size_t i = 0; i < st->n_layers; i++)
    ib_strv_push (&digests, st->layers[i].digest);
  if (rmdir (st->rootfs) < 0 && errno != ENOENT)
    return ib_error_sys (err, errno, "prepare %s", st->rootfs);
  /* The new top is recorded as a snapshot: the next build that misses
   * after the same cached steps (an edit-rebuild loop) copies it instead of
   * unpacking the layers again. */
  if (ib_rootfs_prepare (b->store, digests, diff_ids, st->rootfs, true, err) < 0)
    return -1;
  st->rootfs_ready = true;
  return 0;
}

/* What a FROM names, its ARGs expanded (*image), and the platform asked
 * (*want: its --platform or the build's, NULL for the host's) as os,
 * arch and variant (the host's when none is asked).  All allocated. */
/* Does a FROM name, after expansion, read as an image reference (or
 * scratch, or a stage)? */
static bool
from_name_ok (const char *image)
{
  ib_ref_t ref;
  if (*image == '\0' || ib_ref_parse (image, &ref, NULL) < 0)
    return false;
  ib_ref_free (&ref);
  return true;
}

int
from_target (build_t *b, const ib_instr_t *in, char **image, char **want, char **os, char **arch,
             char **variant, ib_error_t *err)
{
  *image = *want = *os = *arch = *variant = NULL;
  if (expand (b, NULL, in->text, image, err) < 0)
    return -1;
  if (strchr (in->text, '$') && !from_name_ok (*image))
    {
      /* FROM ${BASE} without BASE: say which ARG, and how to give it */
      ib_buf_t unset = { 0 };
      for (const char *p = strchr (in->text, '$'); p; p = strchr (p + 1, '$'))
        {
          const char *n = p + 1 + (p[1] == '{');
          size_t len = strspn (n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
          cleanup_free char *name = xstrndup (n, len);
          const char *v = len ? vars_get (&b->global_args, name, NULL) : "";
          if (len && (v == NULL || *v == '\0'))
            ib_buf_printf (&unset, "%s%s", unset.len ? ", " : "", name);
        }
      cleanup_free char *names = ib_buf_steal (&unset);
      if (names && *names)
        {
          const char *first = names;
          size_t fl = strcspn (first, ",");
          ib_error_set (err, EINVAL,
                        "%s: %s %s not set (give --build-arg %.*s=..., or a default: ARG "
                        "%.*s=... before the first FROM)",
                        in->text, names, strchr (names, ',') ? "are" : "is", (int) fl, first,
                        (int) fl, first);
          free (*image);
          *image = NULL;
          return -1;
        }
    }
  const char *platform = ib_instr_flag (in, "platform");
  if (platform && expand (b, NULL, platform, want, err) < 0)
    return -1;
  if (*want == NULL && b->opts->platform)
    *want = xstrdup (b->opts->platform); /* build --platform: the default of every FROM */
  if (*want)
    {
      if (ib_platform_parse (*want, os, arch, variant, err) < 0)
        return ib_error_prefix (err, "--platform=%s", *want);
      return 0;
    }
  const char *hos, *harch, *hvar;
  ib_host_platform (&hos, &harch, &hvar);
  *os = xstrdup (hos);
  *arch = xstrdup (harch);
  *variant = hvar ? xstrdup (hvar) : NULL;
  return 0;
}

stage_state_t *
image_source (build_t *b, const ib_instr_t *in, const char *image, ib_error_t *err)
{
  for (size_t i = 0; i < b->n_image_sources; i++)
    if (strcmp (b->image_sources[i]->def->name, image) == 0)
      return b->image_sources[i];
  if (!from_name_ok (image) || strcmp (image, "scratch") == 0)
    {
      ib_error_set (err, ENOENT, "--from=%s: neither an earlier stage nor an image reference",
                    image);
      return NULL;
    }
  stage_state_t *s = xmalloc (sizeof *s);
  ib_stage_t *def = xmalloc (sizeof *def);
  def->name = xstrdup (image);
  def->index = -1;
  s->def = def;
  b->image_sources = xrealloc (b->image_sources,
                               (b->n_image_sources + 1) * sizeof (stage_state_t *));
  b->image_sources[b->n_image_sources++] = s; /* freed with the build */
  /* the platform as a FROM of that image would have it (the build's) */
  char *flags[] = { NULL };
  ib_instr_t from = { .kind = IB_I_FROM, .keyword = "FROM", .line = in->line,
                      .text = (char *) image, .flags = flags };
  cleanup_free char *img = NULL, *want = NULL, *os = NULL, *arch = NULL, *variant = NULL;
  if (from_target (b, &from, &img, &want, &os, &arch, &variant, err) < 0
      || ib_store_tmp_dir (b->store, "stage", &s->rootfs, err) < 0
      || (rmdir (s->rootfs) < 0 && ib_error_sys (err, errno, "%s", s->rootfs) < 0)
      || from_image (b, s, img, os, arch, variant, want != NULL, err) < 0
      || ensure_rootfs (b, s, err) < 0)
    {
      ib_error_prefix (err, "--from=%s", image);
      return NULL;
    }
  return s;
}

const char *
named_context (build_t *b, const char *name, bool *is_image)
{
  size_t n = strlen (name);
  for (char *const *c = b->opts->build_contexts; c && *c; c++)
    if (strncmp (*c, name, n) == 0 && (*c)[n] == '=')
      {
        const char *v = *c + n + 1;
        *is_image = ib_str_has_prefix (v, "docker-image://");
        return *is_image ? v + strlen ("docker-image://") : v;
      }
  return NULL;
}

int
check_named_contexts (build_t *b, ib_error_t *err)
{
  for (char *const *c = b->opts->build_contexts; c && *c; c++)
    {
      const char *eq = strchr (*c, '=');
      if (eq == NULL || eq == *c)
        return ib_error_set (err, EINVAL, "--build-context %s: expected NAME=VALUE", *c);
      const char *v = eq + 1;
      if (ib_str_has_prefix (v, "docker-image://"))
        {
          ib_ref_t ref;
          if (ib_ref_parse (v + strlen ("docker-image://"), &ref, err) < 0)
            return ib_error_prefix (err, "--build-context %s", *c);
          ib_ref_free (&ref);
          continue;
        }
      if (strstr (v, "://"))
        return ib_error_set (err, ENOTSUP,
                             "--build-context %s: only docker-image://REF and a directory are "
                             "supported",
                             *c);
      struct stat sb;
      if (stat (v, &sb) < 0 || !S_ISDIR (sb.st_mode))
        return ib_error_set (err, ENOENT, "--build-context %s: %s is not a directory", *c, v);
    }
  return 0;
}

stage_state_t *
dir_context_source (build_t *b, const char *name, const char *dir, ib_error_t *err)
{
  for (size_t i = 0; i < b->n_image_sources; i++)
    if (b->image_sources[i]->def->index == DIR_CONTEXT_INDEX
        && strcmp (b->image_sources[i]->def->name, name) == 0)
      return b->image_sources[i];
  char *real = realpath (dir, NULL);
  if (real == NULL)
    {
      ib_error_sys (err, errno, "--build-context %s=%s", name, dir);
      return NULL;
    }
  /* the key: every file's path, mode and bytes, as the context's COPY sources */
  ib_sha256_t *h = ib_sha256_new ();
  size_t entries = 0;
  if (ib_cache_hash_path (real, h, &entries, err) < 0)
    {
      ib_sha256_free (h);
      free (real);
      ib_error_prefix (err, "--build-context %s", name);
      return NULL;
    }
  stage_state_t *s = xmalloc (sizeof *s);
  ib_stage_t *def = xmalloc (sizeof *def);
  def->name = xstrdup (name);
  def->index = DIR_CONTEXT_INDEX;
  s->def = def;
  s->rootfs = real;
  s->rootfs_ready = true;
  char digest[IB_DIGEST_LEN];
  ib_sha256_final (h, digest);
  cleanup_free char *text = xasprintf ("build-context %s %s", name, digest);
  ib_cache_key (NULL, text, s->key);
  b->image_sources = xrealloc (b->image_sources,
                               (b->n_image_sources + 1) * sizeof (stage_state_t *));
  b->image_sources[b->n_image_sources++] = s; /* freed with the build; the directory stays */
  return s;
}

int
do_from (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  cleanup_free char *image = NULL, *want = NULL, *os = NULL, *arch = NULL, *variant = NULL;
  if (from_target (b, in, &image, &want, &os, &arch, &variant, err) < 0)
    return -1;
  const char *hos, *harch, *hvar;
  ib_host_platform (&hos, &harch, &hvar);
  /* Another platform's image: its RUN steps need the kernel's binfmt_misc
   * emulation (run.c check_emulation says whether it is there). */
  if (want && ib_platform_rank (hos, harch, hvar, os, arch, variant) == 0)
    st->foreign = ib_platform_string (os, arch, variant);
  if (ib_store_tmp_dir (b->store, "stage", &st->rootfs, err) < 0)
    return -1;
  int idx = stage_index_before (b, image, (size_t) (st - b->stages));
  if (idx < 0 || (size_t) idx >= (size_t) (st - b->stages))
    {
      /* --build-context NAME=docker-image://REF: FROM NAME is REF */
      bool is_image = false;
      const char *ctx = named_context (b, image, &is_image);
      if (ctx && !is_image)
        return ib_error_set (err, EINVAL,
                             "the build context %s is a directory; FROM takes an image "
                             "(--build-context %s=docker-image://REF)",
                             image, image);
      if (ctx)
        {
          free (image);
          image = xstrdup (ctx);
        }
    }
  step_line (b, st, "FROM", image, false, false);
  if (idx >= 0 && (size_t) idx < (size_t) (st - b->stages))
    {
      /* its layers' blobs: the new stage's manifest lists them */
      if (b->stages[idx].n_pending > 0 && join_layers (b, &b->stages[idx], err) < 0)
        return -1;
      return from_stage (st, &b->stages[idx], err);
    }
  if (strcmp (image, "scratch") == 0)
    {
      /* BuildKit's empty image (dockerfile2llb's emptyImage): WorkingDir
       * "/" and the default PATH, so that a scratch stage's RUN and the
       * image's users find programs as Docker's would */
      st->config = json_pack ("{s:s, s:s, s:{s:[s], s:s}, s:{s:s, s:[]}}", "architecture", arch,
                              "os", os, "config", "Env", DEFAULT_PATH, "WorkingDir", "/",
                              "rootfs", "type", "layers", "diff_ids");
      if (variant)
        json_object_set_new (st->config, "variant", json_string (variant));
      st->layers = xmalloc (sizeof (ib_descriptor_t));
      st->rootfs_ready = true;
      cleanup_free char *plat = ib_platform_string (os, arch, variant);
      /* "config": what the empty image holds, so that records made before
       * it held PATH and WorkingDir are not taken */
      cleanup_free char *text = xasprintf ("FROM scratch %s\nconfig Env=PATH WorkingDir=/", plat);
      ib_cache_key (NULL, text, st->key);
      return 0;
    }
  if (rmdir (st->rootfs) < 0) /* ib_rootfs_prepare creates it */
    return ib_error_sys (err, errno, "prepare %s", st->rootfs);
  return from_image (b, st, image, os, arch, variant, want != NULL, err);
}
