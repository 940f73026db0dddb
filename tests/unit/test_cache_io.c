/* tests/unit/test_cache_io.c — sharing the build cache (builder/engine/cache_io.h):
 * type=local export and import between two stores, the layout written,
 * spec errors, a missing cache, a damaged one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/unit.h"

#include "builder/engine/cache.h"
#include "builder/engine/cache_io.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static ib_store_t *
open_store (const char *dir, const char *name)
{
  cleanup_free char *root = ib_path_join (dir, name);
  ib_store_t *s = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_store_open (root, &s, &err), 0);
  assert_null (err);
  return s;
}

static void
put_blob (ib_store_t *s, const char *bytes, ib_descriptor_t *d)
{
  ib_error_t err = NULL;
  assert_int_equal (ib_store_put_blob (s, bytes, strlen (bytes), d->digest, &err), 0);
  d->media_type = (char *) IB_MT_OCI_LAYER_GZIP;
  d->size = (int64_t) strlen (bytes);
}

static char *
slurp (const char *path)
{
  char *data = NULL;
  size_t len = 0;
  ib_error_t err = NULL;
  if (ib_read_file (path, &data, &len, &err) < 0)
    {
      ib_error_free (&err);
      return NULL;
    }
  return data;
}

static char *
record_file (ib_store_t *s, const char *key)
{
  return xasprintf ("%s/cache/steps/%s.json", s->root, ib_digest_hex (key));
}

static bool
hits (ib_store_t *s, const char *key)
{
  json_t *c = NULL;
  ib_descriptor_t *ls = NULL;
  size_t n = 0;
  int r = ib_cache_get (s, key, &c, &ls, &n);
  json_decref (c);
  for (size_t i = 0; i < n; i++)
    free (ls[i].media_type);
  free (ls);
  return r == 1;
}

/* A store with two step records: k1 (layers base, one) and k2 (base, one,
 * two); k3 has no record.  keys[] gets k1, k2, k1 again, k3, NULL. */
typedef struct fixture
{
  ib_store_t *store;
  char k1[IB_DIGEST_LEN], k2[IB_DIGEST_LEN], k3[IB_DIGEST_LEN];
  ib_descriptor_t base, one, two;
  char *keys[5];
} fixture_t;

static void
make_fixture (const char *dir, fixture_t *f)
{
  memset (f, 0, sizeof *f);
  f->store = open_store (dir, "a");
  put_blob (f->store, "base layer bytes", &f->base);
  put_blob (f->store, "layer one bytes", &f->one);
  put_blob (f->store, "layer two, longer bytes", &f->two);
  ib_cache_key (NULL, "FROM base", f->k1);
  ib_cache_key (f->k1, "RUN two", f->k2);
  ib_cache_key (f->k2, "RUN never recorded", f->k3);
  ib_error_t err = NULL;
  json_t *c1 = json_pack ("{s:s, s:{s:[s]}}", "architecture", "amd64", "config", "Env", "A=1");
  json_t *c2 = json_pack ("{s:s, s:{s:[s], s:[s]}}", "architecture", "amd64", "config", "Env",
                          "A=1", "Cmd", "sh");
  ib_descriptor_t l1[] = { f->base, f->one };
  ib_descriptor_t l2[] = { f->base, f->one, f->two };
  assert_int_equal (ib_cache_put (f->store, f->k1, c1, l1, 2, &err), 0);
  assert_int_equal (ib_cache_put (f->store, f->k2, c2, l2, 3, &err), 0);
  json_decref (c1);
  json_decref (c2);
  f->keys[0] = f->k1;
  f->keys[1] = f->k2;
  f->keys[2] = f->k1;
  f->keys[3] = f->k3;
  f->keys[4] = NULL;
}

/* The JSON of blob `digest` in the layout at `dir`. */
static json_t *
layout_blob (const char *dir, const char *digest)
{
  cleanup_free char *p = xasprintf ("%s/blobs/sha256/%s", dir, ib_digest_hex (digest));
  cleanup_free char *text = slurp (p);
  assert_non_null (text);
  char got[IB_DIGEST_LEN];
  ib_digest_buf (text, strlen (text), got);
  assert_string_equal (got, digest);
  json_t *j = json_loads (text, 0, NULL);
  assert_non_null (j);
  return j;
}

static void
test_local_export_then_import (void **state)
{
  const char *dir = *state;
  fixture_t f;
  make_fixture (dir, &f);
  cleanup_free char *dest = ib_path_join (dir, "exported/cache");
  cleanup_free char *to = xasprintf ("type=local,dest=%s,mode=max", dest);
  ib_error_t err = NULL;
  assert_int_equal (ib_cache_export (f.store, f.keys, to, &err), 0);
  assert_null (err);

  /* an OCI image layout: index.json names the manifest "cache" */
  cleanup_free char *layout_path = ib_path_join (dest, "oci-layout");
  cleanup_free char *layout = slurp (layout_path);
  assert_non_null (layout);
  assert_non_null (strstr (layout, "\"imageLayoutVersion\":\"1.0.0\""));
  cleanup_free char *ipath = ib_path_join (dest, "index.json");
  json_t *index = json_load_file (ipath, 0, NULL);
  assert_non_null (index);
  json_t *d = json_array_get (json_object_get (index, "manifests"), 0);
  assert_string_equal (json_string_value (json_object_get (
                           json_object_get (d, "annotations"), "org.opencontainers.image.ref.name")),
                       "cache");
  assert_string_equal (json_string_value (json_object_get (d, "mediaType")), IB_MT_OCI_MANIFEST);
  json_t *m = layout_blob (dest, json_string_value (json_object_get (d, "digest")));
  assert_int_equal (json_integer_value (json_object_get (m, "schemaVersion")), 2);
  assert_string_equal (json_string_value (json_object_get (m, "artifactType")),
                       IB_CACHE_ARTIFACT_TYPE);
  json_t *cd = json_object_get (m, "config");
  assert_string_equal (json_string_value (json_object_get (cd, "mediaType")),
                       IB_CACHE_CONFIG_TYPE);
  /* the three blobs, each once, base first */
  json_t *ls = json_object_get (m, "layers");
  assert_int_equal (json_array_size (ls), 3);
  assert_string_equal (json_string_value (json_object_get (json_array_get (ls, 0), "digest")),
                       f.base.digest);
  for (size_t i = 0; i < 3; i++)
    {
      json_t *l = json_array_get (ls, i);
      assert_string_equal (json_string_value (json_object_get (l, "mediaType")),
                           IB_MT_OCI_LAYER_GZIP);
      cleanup_free char *bp = xasprintf ("%s/blobs/sha256/%s", dest,
                                         ib_digest_hex (json_string_value (json_object_get (l, "digest"))));
      struct stat sb;
      assert_int_equal (stat (bp, &sb), 0);
      assert_int_equal (sb.st_size, json_integer_value (json_object_get (l, "size")));
    }
  /* the config: the two records (k3 has none), under their keys' hex */
  json_t *cfg = layout_blob (dest, json_string_value (json_object_get (cd, "digest")));
  assert_int_equal (json_integer_value (json_object_get (cfg, "v")), 1);
  json_t *recs = json_object_get (cfg, "records");
  assert_int_equal (json_object_size (recs), 2);
  assert_non_null (json_object_get (recs, ib_digest_hex (f.k1)));
  assert_non_null (json_object_get (recs, ib_digest_hex (f.k2)));
  assert_null (json_object_get (recs, ib_digest_hex (f.k3)));
  json_decref (cfg);
  json_decref (m);
  json_decref (index);

  /* nothing left beside it */
  cleanup_free char *parent = ib_path_join (dir, "exported");
  DIR *dh = opendir (parent);
  assert_non_null (dh);
  struct dirent *de;
  size_t entries = 0;
  while ((de = readdir (dh)) != NULL)
    if (strcmp (de->d_name, ".") && strcmp (de->d_name, ".."))
      {
        assert_string_equal (de->d_name, "cache");
        entries++;
      }
  closedir (dh);
  assert_int_equal (entries, 1);

  /* import into an empty store: the same record bytes, and hits */
  ib_store_t *b = open_store (dir, "b");
  cleanup_free char *from = xasprintf ("type=local,src=%s", dest);
  assert_false (hits (b, f.k1));
  assert_int_equal (ib_cache_import (b, from, &err), 0);
  assert_null (err);
  char *both[] = { f.k1, f.k2 };
  for (size_t i = 0; i < 2; i++)
    {
      cleanup_free char *pa = record_file (f.store, both[i]);
      cleanup_free char *pb = record_file (b, both[i]);
      cleanup_free char *ra = slurp (pa);
      cleanup_free char *rb = slurp (pb);
      assert_non_null (rb);
      assert_string_equal (ra, rb);
      assert_true (hits (b, both[i]));
    }
  cleanup_free char *p3 = record_file (b, f.k3);
  assert_int_equal (access (p3, F_OK), -1);
  assert_true (ib_store_has_blob (b, f.two.digest));

  /* again: existing records are kept, nothing fails */
  assert_int_equal (ib_cache_import (b, from, &err), 0);
  assert_true (hits (b, f.k2));

  /* exporting again replaces the earlier cache (one record now) */
  char *only[] = { f.k1, NULL };
  assert_int_equal (ib_cache_export (f.store, only, to, &err), 0);
  assert_null (err);
  index = json_load_file (ipath, 0, NULL);
  d = json_array_get (json_object_get (index, "manifests"), 0);
  m = layout_blob (dest, json_string_value (json_object_get (d, "digest")));
  assert_int_equal (json_array_size (json_object_get (m, "layers")), 2);
  json_decref (m);
  json_decref (index);

  ib_store_close (b);
  ib_store_close (f.store);
}

static void
test_export_refuses_to_replace_another_directory (void **state)
{
  const char *dir = *state;
  fixture_t f;
  make_fixture (dir, &f);
  cleanup_free char *dest = ib_path_join (dir, "precious");
  cleanup_free char *file = ib_path_join (dest, "notes.txt");
  assert_int_equal (mkdir (dest, 0755), 0);
  ib_error_t err = NULL;
  assert_int_equal (ib_write_file_atomic (file, "keep me\n", 8, 0644, &err), 0);
  cleanup_free char *to = xasprintf ("type=local,dest=%s", dest);
  assert_int_equal (ib_cache_export (f.store, f.keys, to, &err), -1);
  assert_non_null (err);
  cleanup_free char *want = xasprintf ("--cache-to %s: %s exists and is not a cache exported by "
                                       "imgbuild; refusing to replace it", to, dest);
  assert_string_equal (err->msg, want);
  ib_error_free (&err);
  cleanup_free char *kept = slurp (file);
  assert_string_equal (kept, "keep me\n");

  /* an empty directory is fine */
  cleanup_free char *empty = ib_path_join (dir, "empty");
  assert_int_equal (mkdir (empty, 0755), 0);
  cleanup_free char *to2 = xasprintf ("type=local,dest=%s", empty);
  assert_int_equal (ib_cache_export (f.store, f.keys, to2, &err), 0);
  assert_null (err);
  ib_store_close (f.store);
}

static void
expect_spec_error (ib_store_t *s, bool export, const char *spec, const char *msg)
{
  ib_error_t err = NULL;
  char *keys[] = { NULL };
  int r = export ? ib_cache_export (s, keys, spec, &err) : ib_cache_import (s, spec, &err);
  assert_int_equal (r, -1);
  assert_non_null (err);
  assert_int_equal (err->status, EINVAL);
  assert_string_equal (err->msg, msg);
  ib_error_free (&err);
}

static void
test_spec_errors (void **state)
{
  ib_store_t *s = open_store (*state, "a");
  expect_spec_error (s, true, "type=s3,dest=x",
                     "--cache-to type=s3,dest=x: unknown cache type \"s3\" (expected local or "
                     "registry)");
  expect_spec_error (s, false, "type=gha",
                     "--cache-from type=gha: unknown cache type \"gha\" (expected local or "
                     "registry)");
  expect_spec_error (s, true, "type=local", "--cache-to type=local: type=local needs dest=DIR");
  expect_spec_error (s, true, "type=local,dest=",
                     "--cache-to type=local,dest=: type=local needs dest=DIR");
  expect_spec_error (s, false, "type=local,dest=d",
                     "--cache-from type=local,dest=d: type=local needs src=DIR");
  expect_spec_error (s, true, "type=registry",
                     "--cache-to type=registry: type=registry needs ref=REF");
  expect_spec_error (s, false, "type=registry,src=x",
                     "--cache-from type=registry,src=x: type=registry needs ref=REF");
  expect_spec_error (s, true, "dest=x",
                     "--cache-to dest=x: no type= (expected type=local or type=registry)");
  expect_spec_error (s, true, "type=local,dest=x,mode=all",
                     "--cache-to type=local,dest=x,mode=all: mode=all: expected min or max");
  expect_spec_error (s, true, "type=local,dest=x,colour=red",
                     "--cache-to type=local,dest=x,colour=red: unknown option \"colour\"");
  expect_spec_error (s, false, "type=local,src",
                     "--cache-from type=local,src: \"src\" is not KEY=VALUE");
  ib_store_close (s);
}

static void
test_missing_source_is_a_warning (void **state)
{
  const char *dir = *state;
  ib_store_t *s = open_store (dir, "a");
  ib_error_t err = NULL;
  cleanup_free char *from = xasprintf ("type=local,src=%s/not-there,mode=max", dir);
  assert_int_equal (ib_cache_import (s, from, &err), 0);
  assert_null (err);
  /* an empty directory (made ready for the cache) too */
  cleanup_free char *empty = ib_path_join (dir, "empty");
  assert_int_equal (mkdir (empty, 0755), 0);
  cleanup_free char *from2 = xasprintf ("type=local,src=%s", empty);
  assert_int_equal (ib_cache_import (s, from2, &err), 0);
  assert_null (err);
  cleanup_free char *steps = xasprintf ("%s/cache/steps", s->root);
  DIR *dh = opendir (steps);
  if (dh)
    {
      struct dirent *de;
      while ((de = readdir (dh)) != NULL)
        assert_true (de->d_name[0] == '.');
      closedir (dh);
    }
  ib_store_close (s);
}

static void
test_tampered_blob_fails_naming_it (void **state)
{
  const char *dir = *state;
  fixture_t f;
  make_fixture (dir, &f);
  cleanup_free char *dest = ib_path_join (dir, "cache");
  cleanup_free char *to = xasprintf ("type=local,dest=%s", dest);
  ib_error_t err = NULL;
  assert_int_equal (ib_cache_export (f.store, f.keys, to, &err), 0);
  /* replace (not rewrite: it may be a hard link to the store's) layer two */
  cleanup_free char *bp = xasprintf ("%s/blobs/sha256/%s", dest, ib_digest_hex (f.two.digest));
  assert_int_equal (unlink (bp), 0);
  assert_int_equal (ib_write_file_atomic (bp, "layer two, other! bytes", 23, 0644, &err), 0);
  assert_true (ib_store_has_blob (f.store, f.two.digest));

  ib_store_t *c = open_store (dir, "c");
  cleanup_free char *from = xasprintf ("type=local,src=%s", dest);
  assert_int_equal (ib_cache_import (c, from, &err), -1);
  assert_non_null (err);
  cleanup_free char *prefix = xasprintf ("--cache-from %s: ", from);
  assert_true (ib_str_has_prefix (err->msg, prefix));
  assert_non_null (strstr (err->msg, f.two.digest));
  assert_non_null (strstr (err->msg, "digest mismatch"));
  ib_error_free (&err);
  assert_false (ib_store_has_blob (c, f.two.digest));
  assert_false (hits (c, f.k2));

  /* a damaged config is an error too */
  ib_store_t *d = open_store (dir, "d");
  cleanup_free char *ipath = ib_path_join (dest, "index.json");
  assert_int_equal (ib_write_file_atomic (ipath, "{\"manifests\":", 13, 0644, &err), 0);
  assert_int_equal (ib_cache_import (d, from, &err), -1);
  assert_non_null (err);
  assert_true (ib_str_has_prefix (err->msg, prefix));
  ib_error_free (&err);

  ib_store_close (d);
  ib_store_close (c);
  ib_store_close (f.store);
}

static void
test_missing_blob_skips_its_records (void **state)
{
  const char *dir = *state;
  fixture_t f;
  make_fixture (dir, &f);
  cleanup_free char *dest = ib_path_join (dir, "cache");
  cleanup_free char *to = xasprintf ("type=local,dest=%s", dest);
  ib_error_t err = NULL;
  assert_int_equal (ib_cache_export (f.store, f.keys, to, &err), 0);
  cleanup_free char *bp = xasprintf ("%s/blobs/sha256/%s", dest, ib_digest_hex (f.two.digest));
  assert_int_equal (unlink (bp), 0);
  ib_store_t *b = open_store (dir, "b");
  cleanup_free char *from = xasprintf ("type=local,src=%s", dest);
  assert_int_equal (ib_cache_import (b, from, &err), 0);
  assert_null (err);
  assert_true (hits (b, f.k1));
  assert_false (hits (b, f.k2));
  cleanup_free char *p2 = record_file (b, f.k2);
  assert_int_equal (access (p2, F_OK), -1);
  ib_store_close (b);
  ib_store_close (f.store);
}

int
main (void)
{
  ib_verbosity = 0;
  const struct CMUnitTest tests[] = {
    unit_test_in_tmpdir (test_local_export_then_import),
    unit_test_in_tmpdir (test_export_refuses_to_replace_another_directory),
    unit_test_in_tmpdir (test_spec_errors),
    unit_test_in_tmpdir (test_missing_source_is_a_warning),
    unit_test_in_tmpdir (test_tampered_blob_fails_naming_it),
    unit_test_in_tmpdir (test_missing_blob_skips_its_records),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
