/* builder/engine/lookup.c — the build cache as a build uses it: a step's
 * key, looking it up and recording its result (builder/cache.c keeps the
 * records). */
#include "builder/engine/engine.h"
#include "builder/engine/fsops.h"
#include "rootfs/overlay.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool
same_layers (const ib_descriptor_t *a, size_t na, const ib_descriptor_t *b, size_t nb)
{
  if (na != nb)
    return false;
  for (size_t i = 0; i < na; i++)
    if (strcmp (a[i].digest, b[i].digest) != 0)
      return false;
  return true;
}

/* After a step (run or taken from the cache) the stage's identity is its
 * input key plus the content of the layers it has (their diff_ids: known
 * as soon as a layer's tar is written, before its compression ends): a
 * step that ran again (--no-cache) and made other bytes changes what the
 * following steps, and the stages that read this one, are keyed on; the
 * same bytes keep their cache hits. */
static void
set_result_key (stage_state_t *st, const char *key)
{
  ib_buf_t t = { 0 };
  cleanup_strv char **diff_ids = NULL;
  ib_config_diff_ids (st->config, &diff_ids, NULL); /* none: FROM scratch */
  for (char **d = diff_ids; d && *d; d++)
    ib_buf_printf (&t, "diff_id %s\n", *d);
  cleanup_free char *text = ib_buf_steal (&t);
  char out[IB_DIGEST_LEN];
  ib_cache_key (key, text, out);
  memcpy (st->key, out, IB_DIGEST_LEN);
}

/* Look the step `key` up, unless the stage runs without the cache.  On a
 * hit the stage takes the recorded config and layers (a tree already made
 * for other layers is dropped, to be made again when needed) and returns
 * 1; 0 on a miss. */
int
cache_lookup (build_t *b, stage_state_t *st, const char *key)
{
  ib_strv_push (&b->keys, key);
  /* A stage with layers still compressing has run a step of its own in
   * this build: its key chain is new, so the later steps' keys are too
   * (records are only written once a step ran), and they run. */
  if (st->no_cache || st->n_pending > 0)
    return 0;
  json_t *cfg = NULL;
  ib_descriptor_t *ls = NULL;
  size_t n = 0;
  if (ib_cache_get (b->store, key, &cfg, &ls, &n) == 0)
    return 0;
  if (!same_layers (st->layers, st->n_layers, ls, n))
    {
      if (st->rootfs_ready && n != 0)
        {
          ib_error_t e = NULL;
          if (ib_rootfs_remove (st->rootfs, &e) < 0 || mkdir (st->rootfs, 0700) < 0)
            {
              ib_warn ("build cache: %s", e ? e->msg : strerror (errno));
              ib_error_free (&e);
              json_decref (cfg);
              for (size_t i = 0; i < n; i++)
                free (ls[i].media_type);
              free (ls);
              return 0;
            }
          st->rootfs_ready = false;
        }
    }
  json_decref (st->config);
  st->config = cfg;
  for (size_t i = 0; i < st->n_layers; i++)
    free (st->layers[i].media_type);
  free (st->layers);
  st->layers = ls;
  st->n_layers = n;
  set_result_key (st, key);
  b->hits++;
  return 1;
}

/* Record the state after a step that ran; failing to is only a warning.
 * While layers of the stage compress, the record waits for them
 * (join_layers writes it). */
void
cache_record (build_t *b, stage_state_t *st, const char *key)
{
  set_result_key (st, key);
  b->misses++;
  if (st->n_pending > 0)
    {
      b->records = xrealloc (b->records, (b->n_records + 1) * sizeof *b->records);
      pending_record_t *r = &b->records[b->n_records++];
      r->st = st;
      snprintf (r->key, IB_DIGEST_LEN, "%s", key);
      r->config = json_deep_copy (st->config);
      r->n_layers = st->n_layers;
      return;
    }
  ib_error_t e = NULL;
  if (ib_cache_put (b->store, key, st->config, st->layers, st->n_layers, &e) < 0)
    {
      ib_warn ("%s", e->msg);
      ib_error_free (&e);
    }
}

/* What shapes the bytes of a layer step's result besides its instruction:
 * the layer format, SOURCE_DATE_EPOCH, the identity mode (owners in the
 * layer). */
void
key_layer_format (build_t *b, ib_buf_t *t)
{
  ib_buf_printf (t, "layer %s %d sde %lld userns %s\n",
                 ib_compression_media_type (b->opts->compression), b->opts->compression_level,
                 (long long) b->sde, ib_userns_mode_name (b->userns));
}

void
key_str (ib_buf_t *t, const char *what, const char *s)
{
  ib_buf_printf (t, "%s %zu:%s\n", what, strlen (s), s);
}

/* The content of a build context path, for a key: "context PATH sha256:..."
 * or "context PATH missing" (the step reports that when it runs). */
void
key_context_path (build_t *b, ib_buf_t *t, const char *path, const ib_ignore_t *excl)
{
  cleanup_free char *host = NULL;
  if (ib_root_resolve (b->context, path, true, &host, NULL) < 0 || access (host, F_OK) < 0)
    {
      ib_buf_printf (t, "context %s missing\n", path);
      return;
    }
  ib_sha256_t *h = ib_sha256_new ();
  char d[IB_DIGEST_LEN];
  if (b->memo == NULL)
    b->memo = ib_cache_memo_open (b->store);
  const char *rel = host + strlen (b->context);
  while (*rel == '/')
    rel++;
  ib_path_filter_t filter = { .ignore = b->ignore, .ignore_base = rel, .exclude = excl };
  if (ib_cache_hash_path_memo (host, b->memo, &filter, h, NULL, NULL) < 0)
    {
      /* unreadable: the step fails when it runs, so no record has this key */
      ib_buf_printf (t, "context %s unreadable\n", path);
      ib_sha256_free (h);
    }
  else
    {
      ib_sha256_final (h, d); /* frees h */
      ib_buf_printf (t, "context %s %s\n", path, d);
    }
}
