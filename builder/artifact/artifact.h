/* builder/artifact/artifact.h — the artifact repository
 * (`imgbuild artifact push|pull`).
 *
 * A C rendering of MXNet CD's artifact repository tool
 * (apache/mxnet cd/utils/artifact_repository.py at commit
 * 22b51361f51204ec29f171c5a8c7c84168752250; its tests
 * cd/utils/test_artifact_repository.py at 3027296b38cc055e9748c604869b3f1aed3c4172).
 * A library build (libmxnet.so, say) is stored with its licenses and
 * dependencies under a key made of four characteristics:
 *
 *   <commit id>/<libtype>/<os>/<variant>/<library file name>
 *   <commit id>/<libtype>/<os>/<variant>/licenses/<file name>
 *   <commit id>/<libtype>/<os>/<variant>/dependencies/<file name>
 *
 * (the layout of the tool's get_s3_key_prefix, not of its README).  Each
 * characteristic is given by a flag or derived as the tool does:
 *   commit id   $MXNET_SHA, else $GIT_COMMIT, else `git rev-parse HEAD`;
 *   os          the platform; on Linux ID and VERSION_ID of /etc/os-release
 *               concatenated ("ubuntu16.04", "centos7");
 *   variant     from the library's MXLibInfoFeatures (dlopen): CUDA on ->
 *               "cu" + `nvcc --version`'s release without the dot ("cu100"),
 *               else ONEDNN (MKLDNN in MXNet 1.x) on -> "cpu", else "native";
 *               a pull without --variant uses "cpu", as the tool does;
 *   libtype     "static" or "dynamic" (default dynamic).
 *
 * Backends (builder/artifact/s3_backend.c, oci_backend.c): an S3 bucket
 * (s3://BUCKET[/PREFIX], one object per file, builder/artifact/s3.h) or an
 * OCI registry repository (one OCI image manifest per key with artifactType
 * IB_ARTIFACT_TYPE, see ib_artifact_oci_tag).  docs/cli.md "Artifact
 * repository" is the user's reference.
 */
#ifndef IB_BUILDER_ARTIFACT_ARTIFACT_H
#define IB_BUILDER_ARTIFACT_ARTIFACT_H

#include "common/error.h"
#include "oci/store.h"

#include <stdbool.h>
#include <stddef.h>

#define IB_ARTIFACT_TYPE "application/vnd.imgbuild.artifact.v1"
#define IB_ARTIFACT_CONFIG_TYPE "application/vnd.imgbuild.artifact.config.v1+json"
#define IB_ARTIFACT_FILE_TYPE "application/octet-stream"
/* Manifest annotation holding the whole key prefix ("c/dynamic/ubuntu16.04/cpu/"). */
#define IB_ARTIFACT_KEY_ANNOTATION "org.imgbuild.artifact.key"
#define IB_ARTIFACT_TITLE_ANNOTATION "org.opencontainers.image.title"

/* The four characteristics; strings owned by the struct (ib_artifact_id_clear). */
typedef struct ib_artifact_id
{
  char *commit;
  char *libtype; /* "static" or "dynamic" */
  char *os;
  char *variant;
} ib_artifact_id_t;
void ib_artifact_id_clear (ib_artifact_id_t *id);

/* "<commit>/<libtype>/<os>/<variant>/", or with `subdir` (NULL or "" for
 * none) "<...>/<variant>/<subdir>/" (the tool's get_s3_key_prefix).
 * Caller frees. */
char *ib_artifact_key_prefix (const ib_artifact_id_t *id, const char *subdir);

/* Check that every characteristic is set, is not "." or "..", and has no
 * '/', control character or blank: each becomes one key component.
 * Errors name the characteristic and say which flag sets it. */
int ib_artifact_id_check (const ib_artifact_id_t *id, ib_error_t *err);

/* The value of `key` in os-release text (os-release(5)), as the tool reads
 * it: each line stripped of surrounding blanks, blank lines skipped, all
 * double quotes removed, split at the first '='; single quotes around the
 * value are removed too (os-release(5) allows them).  NULL when absent.
 * Caller frees. */
char *ib_os_release_value (const char *text, const char *key);

/* The os characteristic for `platform` (a uname sysname, lowercase:
 * "linux", "darwin", ...): on Linux ID + VERSION_ID from the os-release
 * file `path` ("ubuntu16.04"; ID alone when VERSION_ID is absent, as on
 * rolling distributions, where the tool would fail); elsewhere the
 * platform itself.  Errors: the file cannot be read, it has no ID. */
int ib_artifact_probe_os (const char *platform, const char *path, char **out, ib_error_t *err);

/* The commit id: $MXNET_SHA, else $GIT_COMMIT (empty counts as unset),
 * else the first line of `git rev-parse HEAD` run in the current
 * directory.  Error when none gives one (the message says to use
 * --git-sha). */
int ib_artifact_probe_commit (char **out, ib_error_t *err);

/* CUDA version digits from `nvcc --version` output: the "release X.Y"
 * of its "Cuda compilation tools, release 10.0, V10.0.130" line -> "100".
 * (The tool's regex takes the first " N.N" anywhere, which on real output
 * is the copyright line's years; we anchor on "release".)  Error when the
 * text has no such line. */
int ib_artifact_parse_nvcc (const char *text, char **out, ib_error_t *err);

/* A library's runtime features (MXNet's include/mxnet/c_api.h LibFeature
 * and MXLibInfoFeatures), looked up by name. */
typedef struct ib_lib_feature
{
  char *name;
  bool enabled;
} ib_lib_feature_t;

/* dlopen `lib` (RTLD_NOW|RTLD_LOCAL; this runs its constructors, as the
 * tool's ctypes.CDLL does) and call its
 *   int MXLibInfoFeatures(const struct LibFeature **features, size_t *size)
 * *out gets a copy (free with ib_lib_features_free).  Errors: the library
 * cannot be loaded, has no MXLibInfoFeatures, or the call returns
 * non-zero; each says to give --variant. */
int ib_artifact_lib_features (const char *lib, ib_lib_feature_t **out, size_t *n,
                              ib_error_t *err);
void ib_lib_features_free (ib_lib_feature_t *f, size_t n);

/* The variant from the features (the tool's probe_mxnet_variant): CUDA
 * enabled -> "cu" + ib_artifact_parse_nvcc (nvcc_output) (nvcc_output
 * NULL: nvcc could not be run -> error); else ONEDNN or MKLDNN enabled ->
 * "cpu"; else "native".  A feature absent counts as disabled. */
int ib_artifact_variant_from_features (const ib_lib_feature_t *f, size_t n,
                                       const char *nvcc_output, char **out, ib_error_t *err);

/* Both together: features of `lib`, and `nvcc --version` (found on PATH)
 * when CUDA is on. */
int ib_artifact_probe_variant (const char *lib, char **out, ib_error_t *err);

/* Expand the --licenses / --dependencies arguments as the tool's
 * sanitize_path_array: each stripped of surrounding blanks, blanks
 * dropped, globbed (glob(3), sorted); directories dropped.  Unlike the
 * tool (whose glob silently drops a missing file) a pattern that names
 * nothing is an error naming it: "WHAT file 'PATH' not found".  Two files
 * with the same name (they would share one key) are an error too.
 * *out: NULL-terminated, caller frees (may be an empty vector). */
int ib_artifact_expand_paths (char *const *patterns, const char *what, char ***out,
                              ib_error_t *err);

/* The meta file written beside a pulled library (the tool's
 * write_libmxnet_meta, a YAML mapping with sorted keys):
 *   "commit_id: C\ndependency_linking: L\nos: O\nvariant: V\n"
 * Values are YAML plain scalars where YAML (1.1, as PyYAML reads it) gives
 * back the same string, else single-quoted ('1234', 'yes').
 * Caller frees. */
char *ib_artifact_meta_text (const ib_artifact_id_t *id);

/* Name of the meta file for library file `lib_name`: the name up to a
 * ".so" / ".dylib" / ".dll" / ".a" extension (and any version after .so)
 * + ".meta": "libmxnet.so" -> "libmxnet.meta" (the tool always writes
 * libmxnet.meta); a name without such an extension + ".meta".  Caller
 * frees. */
char *ib_artifact_meta_name (const char *lib_name);

/* The OCI tag for key prefix `key` (tags: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127},
 * distribution-spec): the components joined with '_'
 * ("abc123/static/ubuntu16.04/cu100/" -> "abc123_static_ubuntu16.04_cu100")
 * when every component is made only of [A-Za-z0-9.-], the first starts
 * with a letter or digit and the result fits in 128 characters (so the
 * mapping is one-to-one); otherwise "sha256_" + the hex sha256 of the key.
 * The full key is also in the manifest annotation IB_ARTIFACT_KEY_ANNOTATION,
 * which pull checks.  Caller frees. */
char *ib_artifact_oci_tag (const char *key);

/* Whether `rel` (a key below the prefix, a layer title) is a safe relative
 * path to create below the destination: not empty, not absolute, no "",
 * "." or ".." component, no NUL-free control characters. */
bool ib_artifact_rel_path_ok (const char *rel);

/* What `imgbuild artifact push|pull` was asked. */
typedef struct ib_artifact_opts
{
  const char *repository;    /* "s3://BUCKET[/PREFIX]" or an OCI repository reference */
  const char *s3_endpoint;   /* NULL: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, or AWS's */
  ib_artifact_id_t id;       /* NULL members: derived */
  const char *lib;           /* push: the library file */
  char **licenses;           /* push: patterns (NULL-terminated, may be NULL) */
  char **dependencies;       /* push: patterns */
  const char *destination;   /* pull: directory (NULL: current directory) */
} ib_artifact_opts_t;

/* Push: check the library, expand licenses (at least one, else "No
 * licenses defined...") and dependencies, derive the missing
 * characteristics, then upload.  S3: the library, each license and
 * dependency as objects under the key prefix (existing objects with other
 * names stay).  OCI: one manifest tagged ib_artifact_oci_tag(prefix) that
 * replaces an earlier one; files are first put in `store` as blobs (may be
 * NULL for S3).  Progress through ib_info. */
int ib_artifact_push (ib_artifact_opts_t *o, ib_store_t *store, ib_error_t *err);

/* Pull: derive the characteristics (variant "cpu" when not given, with a
 * warning), fetch every file under the key prefix into a temp directory
 * in the destination, verify (OCI: digests; S3: sizes, and the sha256 that
 * our push stores as object metadata), then rename each into place
 * (dest/<lib>, dest/licenses/..., dest/dependencies/..., nested keys as
 * nested directories) and write dest/<lib stem>.meta for each file at the
 * top level.  ENOENT "no artifact found for KEY in REPO" when nothing
 * matches. */
int ib_artifact_pull (ib_artifact_opts_t *o, ib_store_t *store, ib_error_t *err);

/* Whether `repository` names the S3 backend ("s3://"). */
bool ib_artifact_is_s3 (const char *repository);

#endif
