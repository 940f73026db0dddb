/* rootfs/prepare.c — an image's rootfs (prepare.h): made from the
 * store's snapshots per chain id and its layer blobs (ib_rootfs_prepare),
 * or unpacked while the image downloads (ib_rootfs_pull); new snapshots
 * recorded for later builds.
 */
#include "rootfs/prepare.h"
#include "common/util.h"
#include "oci/manifest.h"
#include "oci/registry.h"
#include "rootfs/overlay.h"
#include "rootfs/rootfs_int.h"
#include "rootfs/treecopy.h"
#include "rootfs/unpack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* Snapshots.                                                             */

static void
record_snapshot (ib_store_t *store, const char *dest, const char *snap)
{
  ib_error_t err = NULL;
  cleanup_free char *tmproot = ib_store_path (store, IB_STORE_TMP, NULL);
  cleanup_free char *snaps = ib_store_path (store, IB_STORE_SNAPSHOTS, NULL);
  /* declared before the first goto: cleanup would free them uninitialised */
  cleanup_free char *tmpl = NULL;
  cleanup_free char *copy = NULL;
  if (ib_mkdir_p (tmproot, 0700, &err) < 0 || ib_mkdir_p (snaps, 0700, &err) < 0)
    goto fail;
  tmpl = ib_path_join (tmproot, "snap-XXXXXX");
  if (mkdtemp (tmpl) == NULL)
    {
      ib_error_sys (&err, errno, "create %s", tmpl);
      goto fail;
    }
  copy = ib_path_join (tmpl, "rootfs");
  if (ib_copy_tree (dest, copy, &err) < 0)
    goto fail_rm;
  if (rename (copy, snap) < 0)
    {
      if (errno != EEXIST && errno != ENOTEMPTY)
        {
          ib_error_sys (&err, errno, "rename %s to %s", copy, snap);
          goto fail_rm;
        }
      ib_debug ("snapshot %s was recorded by another process", snap);
    }
  if (ib_rm_rf (tmpl, &err) < 0)
    goto fail;
  return;
fail_rm:
  ib_rm_rf (tmpl, NULL); /* the error to report is the one above */
fail:
  ib_warn ("snapshot not recorded: %s", err ? err->msg : "unknown error");
  ib_error_free (&err);
}

/* `dest`, a tree just unpacked from nothing for snapshot `snap`: with
 * overlays, it becomes the snapshot itself (a rename, no copy) and dest an
 * overlay on it; else (or when dest is an overlay already) the snapshot is
 * recorded as a copy.  Only a failure that leaves dest missing is an
 * error. */
static int
keep_snapshot (ib_store_t *store, const char *dest, const char *snap, ib_error_t *err)
{
  if (rfs_is_dir (snap))
    return 0;
  cleanup_free char *snaps = ib_store_path (store, IB_STORE_SNAPSHOTS, NULL);
  if (!rfs_overlay_usable () || ib_rootfs_is_overlay (dest)
      || ib_mkdir_p (snaps, 0700, NULL) < 0 || rename (dest, snap) < 0)
    {
      record_snapshot (store, dest, snap);
      return 0;
    }
  int o = ib_rootfs_overlay_from (snap, dest, err);
  if (o == 0 && ib_copy_rootfs (snap, dest, err) < 0)
    o = -1;
  return o < 0 ? ib_error_prefix (err, "prepare %s from snapshot %s", dest, snap) : 0;
}

/* ---------------------------------------------------------------------- */
/* Layers from the store's blobs (rfs_unpack_layers).                     */

struct blob_src
{
  ib_store_t *store;
  char *const *digests;
};

static int
blob_open (void *ctx, size_t i, ib_layer_read_fn *fn, void **ud, ib_error_t *err)
{
  struct blob_src *b = ctx;
  cleanup_free char *blob = ib_store_blob_path (b->store, b->digests[i]);
  int fd = blob ? open (blob, O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0)
    return ib_error_set (err, ENOENT, "layer %zu (%s) is not in the store", i, b->digests[i]);
  posix_fadvise (fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  int *fdp = xmalloc (sizeof *fdp);
  *fdp = fd;
  *fn = rfs_fd_read;
  *ud = fdp;
  return 0;
}

static void
blob_close (void *ctx, size_t i, void *ud)
{
  (void) ctx;
  (void) i;
  close (*(int *) ud);
  free (ud);
}

int
ib_rootfs_prepare (ib_store_t *store, char *const *layer_digests, char *const *diff_ids,
                   const char *dest, bool snapshot, ib_error_t *err)
{
  size_t n = ib_strv_len (layer_digests);
  if (ib_strv_len (diff_ids) != n)
    return ib_error_set (err, EINVAL, "prepare %s: %zu layers but %zu diff_ids", dest, n,
                         ib_strv_len (diff_ids));
  for (size_t i = 0; i < n; i++)
    if (!ib_digest_valid (layer_digests[i]) || !ib_digest_valid (diff_ids[i]))
      return ib_error_set (err, EINVAL, "prepare %s: layer %zu: invalid digest %s / %s", dest, i,
                           layer_digests[i], diff_ids[i]);

  cleanup_free char *snaps = ib_store_path (store, IB_STORE_SNAPSHOTS, NULL);
  size_t have = 0;
  cleanup_free char *base_snap = NULL;
  /* The longest stored prefix: a snapshot directory, or a layered one
   * (ib_rootfs_freeze) while overlays can be made. */
again:
  for (size_t k = n; k > 0; k--)
    {
      char chain[IB_DIGEST_LEN];
      ib_chain_id (diff_ids, k - 1, chain);
      cleanup_free char *p = ib_path_join (snaps, ib_digest_hex (chain));
      if (rfs_is_dir (p) || rfs_layered_snapshot_ok (p))
        {
          have = k;
          base_snap = steal_pointer (&p);
          break;
        }
    }

  if (base_snap)
    {
      ib_debug ("rootfs %s: from snapshot %s (%zu of %zu layers)", dest, base_snap, have, n);
      int o = ib_rootfs_overlay_from (base_snap, dest, err);
      if (o == 0 && !rfs_is_dir (base_snap))
        {
          /* overlays turned out unusable: a layered snapshot cannot be copied */
          free (steal_pointer (&base_snap));
          have = 0;
          goto again;
        }
      if (o < 0 || (o == 0 && ib_copy_rootfs (base_snap, dest, err) < 0))
        return ib_error_prefix (err, "prepare %s", dest);
    }
  else if (mkdir (dest, 0755) < 0)
    return ib_error_sys (err, errno, "prepare %s: create", dest);

  struct blob_src bs = { .store = store, .digests = layer_digests };
  cleanup_strv char **names = NULL;
  for (size_t i = 0; i < n; i++)
    {
      cleanup_free char *blob = ib_store_blob_path (store, layer_digests[i]);
      ib_strv_push (&names, blob ? blob : layer_digests[i]);
    }
  rfs_layer_src_t src = { .open = blob_open, .close = blob_close, .names = names,
                          .digests = layer_digests, .diff_ids = diff_ids, .ctx = &bs };
  /* several at once only onto a plain directory: an overlay takes no
   * rename from outside it */
  int r = rfs_unpack_layers (dest, have, n, have == 0, &src, err);
  if (r < 0)
    {
      ib_rootfs_remove (dest, NULL);
      return ib_error_prefix (err, "prepare %s", dest);
    }

  if (snapshot && have < n)
    {
      char chain[IB_DIGEST_LEN];
      ib_chain_id (diff_ids, n - 1, chain);
      cleanup_free char *snap = ib_path_join (snaps, ib_digest_hex (chain));
      if (have == 0)
        return keep_snapshot (store, dest, snap, err);
      /* an overlay on a snapshot: its upper directory becomes a layered
       * snapshot, no copy; else the tree is copied */
      int f = ib_rootfs_freeze (store, dest, ib_digest_hex (chain), err);
      if (f < 0)
        return ib_error_prefix (err, "prepare %s", dest);
      cleanup_free char *snap_ovl = rfs_ovl_dir (snap);
      if (f == 0 && !rfs_is_dir (snap) && !rfs_is_dir (snap_ovl))
        record_snapshot (store, dest, snap);
    }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Pull and unpack in one pass.                                           */

struct pull_reader
{
  ib_pull_session_t *s;
  size_t layer;
  ib_fetch_cursor_t cur;
};

static ssize_t
pull_read (void *ud, void *buf, size_t len, ib_error_t *err)
{
  struct pull_reader *pr = ud;
  return ib_pull_session_read (pr->s, pr->layer, &pr->cur, buf, len, err);
}

/* Layers as they download (rfs_unpack_layers). */
struct stream_src
{
  ib_pull_session_t *s;
  size_t next;           /* the first layer not yet applied */
};

static int
stream_open (void *ctx, size_t i, ib_layer_read_fn *fn, void **ud, ib_error_t *err)
{
  (void) err;
  struct stream_src *ss = ctx;
  struct pull_reader *pr = xmalloc (sizeof *pr);
  memset (pr, 0, sizeof *pr);
  pr->s = ss->s;
  pr->layer = i;
  *fn = pull_read;
  *ud = pr;
  return 0;
}

static void
stream_close (void *ctx, size_t i, void *ud)
{
  (void) ctx;
  (void) i;
  free (ud);
}

static void
stream_applied (void *ctx, size_t i)
{
  struct stream_src *ss = ctx;
  ib_pull_session_layer_done (ss->s, i, true, NULL);
  ss->next = i + 1;
}

static void
remove_quietly (const char *path)
{
  ib_rm_rf (path, NULL);
}

int
ib_rootfs_pull (ib_store_t *store, const char *ref, const char *os, const char *arch,
                const char *variant, const char *dest, bool snapshot, ib_error_t *err)
{
  ib_pull_session_t *s = NULL;
  if (ib_pull_begin (store, ref, os, arch, variant, true, &s, err) < 0)
    return -1;
  const ib_manifest_t *m = ib_pull_session_manifest (s);
  cleanup_strv char **diff_ids = NULL;
  cleanup_strv char **digests = NULL;
  size_t n = m->n_layers;
  if (ib_config_diff_ids (ib_pull_session_config (s), &diff_ids, err) < 0)
    {
      ib_pull_abort (s);
      return ib_error_prefix (err, "pull %s", ref);
    }
  if (ib_strv_len (diff_ids) != n)
    {
      ib_pull_abort (s);
      return ib_error_set (err, EINVAL,
                           "pull %s: the config lists %zu diff_ids but the manifest %zu layers",
                           ref, ib_strv_len (diff_ids), n);
    }
  for (size_t i = 0; i < n; i++)
    ib_strv_push (&digests, m->layers[i].digest);
  if (mkdir (dest, 0755) < 0)
    {
      int e = errno;
      ib_pull_abort (s);
      return ib_error_sys (err, e, "unpack %s into %s", ref, dest);
    }

  /* Layers unpack while they (and the ones after them) download, several
   * at once (rfs_unpack_layers). */
  bool start_over = false;
  cleanup_strv char **names = NULL;
  for (size_t i = 0; i < n; i++)
    {
      char name[64];
      snprintf (name, sizeof name, "%zu (%.19s..)", i, digests[i]);
      ib_strv_push (&names, name);
    }
  struct stream_src ss = { .s = s };
  rfs_layer_src_t src = { .open = stream_open, .close = stream_close, .applied = stream_applied,
                          .names = names, .digests = digests, .diff_ids = diff_ids, .ctx = &ss };
  ib_error_t e = NULL;
  if (rfs_unpack_layers (dest, 0, n, true, &src, &e) < 0)
    {
      if (e->status == ESTALE)
        {
          /* a download started over: unpack from the store once it is there */
          ib_debug ("%s", e->msg);
          ib_error_free (&e);
          start_over = true;
        }
      else
        {
          ib_pull_session_layer_done (s, ss.next, false, e->msg);
          ib_pull_abort (s);
          remove_quietly (dest);
          *err = e;
          return ib_error_prefix (err, "pull %s", ref);
        }
    }
  if (ib_pull_end (s, NULL, err) < 0)
    {
      remove_quietly (dest);
      return -1;
    }
  if (start_over)
    {
      remove_quietly (dest);
      return ib_rootfs_prepare (store, digests, diff_ids, dest, snapshot, err);
    }
  if (snapshot && n > 0)
    {
      char chain[IB_DIGEST_LEN];
      ib_chain_id (diff_ids, n - 1, chain);
      cleanup_free char *snaps = ib_store_path (store, IB_STORE_SNAPSHOTS, NULL);
      cleanup_free char *snap = ib_path_join (snaps, ib_digest_hex (chain));
      if (keep_snapshot (store, dest, snap, err) < 0)
        return ib_error_prefix (err, "pull %s", ref);
    }
  return 0;
}
