/* oci/regconf.h — registry settings: the process-wide TLS and upload
 * options the CLI sets, and the registries configuration file
 * (containers-registries.conf(5), version 2, the subset described below).
 *
 * The file is TOML; Debian 12 has no C TOML library, so a small strict
 * parser for the subset lives in regconf.c: comments, `key = value` with
 * bare or quoted keys, `[table]` and `[[array-of-tables]]` headers, basic
 * and literal strings, booleans, integers, arrays (several lines allowed)
 * and one-line inline tables.  Anything else (multi-line strings, floats,
 * dates) is an error "FILE:LINE: ...".
 *
 * Understood: `[[registry]]` with `prefix`, `location`, `insecure`,
 * `blocked`, `mirror-by-digest-only`, and `[[registry.mirror]]` (or
 * `mirror = [{...}]`) with `location`, `insecure`, `pull-from-mirror`.
 * Short names (oci/shortname.h): `unqualified-search-registries`,
 * `short-name-mode` and the `[aliases]` table.
 * Other keys and tables (version 1's `[registries.search]`,
 * `credential-helpers`, ...) are ignored with a debug note.
 */
#ifndef IB_OCI_REGCONF_H
#define IB_OCI_REGCONF_H

#include "common/error.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum
{
  IB_MIRROR_PULL_ALL,
  IB_MIRROR_PULL_DIGEST_ONLY,
  IB_MIRROR_PULL_TAG_ONLY,
} ib_mirror_pull_t;

typedef struct ib_reg_mirror
{
  char *location; /* "127.0.0.1:5000/lib" */
  bool insecure;
  ib_mirror_pull_t pull_from;
} ib_reg_mirror_t;

typedef struct ib_reg_entry
{
  char *prefix;   /* "docker.io/library", "quay.io", "*.example.com" */
  char *location; /* "127.0.0.1:5000/lib"; equal to prefix when not given */
  bool insecure, blocked, mirror_by_digest_only;
  ib_reg_mirror_t *mirrors;
  size_t n_mirrors;
  int line; /* line of its [[registry]] header, for messages */
  char *path; /* the file it was read from (a drop-in's, after ib_regconf_merge) */
} ib_reg_entry_t;

/* short-name-mode (containers-registries.conf(5)); UNSET behaves as
 * ENFORCING: imgbuild never prompts, so an ambiguous short name is an
 * error there, and PERMISSIVE and DISABLED try the candidates in order. */
typedef enum
{
  IB_SHORT_NAME_UNSET,
  IB_SHORT_NAME_ENFORCING,
  IB_SHORT_NAME_PERMISSIVE,
  IB_SHORT_NAME_DISABLED,
} ib_short_name_mode_t;

typedef struct ib_regconf
{
  char *path; /* for messages */
  ib_reg_entry_t *entries;
  size_t n_entries;
  /* unqualified-search-registries (NULL-terminated; search_path: the file
   * that set it, NULL when no file did) */
  char **search;
  char *search_path;
  /* [aliases]: alias_names[i] (a short name, "debian", "ns/app") stands
   * for alias_values[i] (a repository with its registry, no tag);
   * alias_paths[i] the file that said so */
  char **alias_names, **alias_values, **alias_paths;
  ib_short_name_mode_t short_name_mode;
} ib_regconf_t;

/* Parse registries.conf text (NUL-terminated); `path` names it in errors
 * ("PATH:LINE: what").  *out is owned by the caller (ib_regconf_free).
 * Errors (EINVAL): TOML outside the subset, a wrong type for a known key,
 * a [[registry]] without prefix and location, a duplicate prefix, a
 * location with a scheme ("https://"), a wildcard prefix with a location,
 * a mirror without a location. */
int ib_regconf_parse (const char *path, const char *text, ib_regconf_t **out, ib_error_t *err);
/* Read and parse a file (ib_regconf_parse's errors, or errno of the read). */
int ib_regconf_load (const char *path, ib_regconf_t **out, ib_error_t *err);
void ib_regconf_free (ib_regconf_t *c);

/* Add the configuration `from` (taken: freed here) to *into (NULL: *into
 * becomes `from`), as containers-registries.conf(5) reads a drop-in
 * file: an entry whose prefix *into already has replaces that entry (in
 * its place), the others go at the end; unqualified-search-registries and
 * short-name-mode, when `from` sets them, replace *into's; an alias
 * replaces the one of the same name. */
void ib_regconf_merge (ib_regconf_t **into, ib_regconf_t *from);

/* The registries configuration files read when neither --registries-conf
 * nor $IMGBUILD_REGISTRIES_CONF names one, in order: the main file, the
 * first that exists of $XDG_CONFIG_HOME/imgbuild/registries.conf,
 * $XDG_CONFIG_HOME/containers/registries.conf (XDG_CONFIG_HOME defaulting
 * to ~/.config) and /etc/containers/registries.conf; then the drop-ins,
 * the *.conf files of /etc/containers/registries.conf.d and then of
 * $XDG_CONFIG_HOME/containers/registries.conf.d, each directory in name
 * order, a user drop-in replacing a system one of the same name (podman's
 * reading).  `sys_root` ("" normally; a test's tree) is put before the
 * /etc paths.  Caller frees. */
char **ib_regconf_default_files (const char *sys_root);

/* The entry whose prefix matches `name` ("registry/repository") best:
 * the longest prefix equal to name or followed in it by '/'; a wildcard
 * prefix "*.example.com" matches any registry host under example.com.
 * NULL when none matches. */
const ib_reg_entry_t *ib_regconf_match (const ib_regconf_t *c, const char *name);

/* One place to pull an image from or push it to. */
typedef struct ib_reg_source
{
  char *registry;   /* "127.0.0.1:5000" */
  char *repository; /* "lib/debian" */
  bool insecure;    /* the config says: TLS without verification, or plain HTTP */
  bool mirror;
} ib_reg_source_t;

/* Where `registry`/`repository` is pulled from (push == false) or pushed
 * to (push == true): for pulls, the matching entry's mirrors in order
 * (only those allowed for a by-digest or by-tag pull), then the primary
 * location; for pushes only the primary location.  Locations replace the
 * entry's prefix in "registry/repository".  c may be NULL (no config: the
 * reference itself).  *out (n entries) is owned by the caller
 * (ib_reg_sources_free).  Errors: EACCES "NAME: blocked by PATH:LINE"
 * for a blocked entry; EINVAL when a location leaves no repository. */
int ib_regconf_sources (const ib_regconf_t *c, const char *registry, const char *repository,
                        bool by_digest, bool push, ib_reg_source_t **out, size_t *n,
                        ib_error_t *err);
void ib_reg_sources_free (ib_reg_source_t *s, size_t n);

/* ---- process-wide options, set by the CLI before any registry client is
 * made (not thread-safe against concurrent setters) ---- */

/* --cert-dir DIR: TLS files for every registry come from DIR itself
 * (oci/certs.h) instead of the certs.d directories.  NULL: default. */
void ib_regconf_set_cert_dir (const char *dir);
const char *ib_regconf_cert_dir (void);

/* --tls-verify: -1 default (HTTPS with verification, loopback registries
 * plain HTTP unless they have TLS files), 1 HTTPS with verification for
 * every registry, loopback included; 0 every registry is insecure (HTTPS
 * without verification, falling back to plain HTTP). */
void ib_regconf_set_tls_verify (int v);
int ib_regconf_tls_verify (void);

/* Blobs larger than `bytes` are pushed in chunks of `bytes` (PATCH); 0
 * (the default) means monolithic uploads always. */
void ib_regconf_set_chunk_size (uint64_t bytes);
uint64_t ib_regconf_chunk_size (void);

/* Network limits, in seconds (docs/cli.md "Network deadlines"):
 *   IB_NET_REQUEST   the deadline of one small request (ping, token,
 *                    manifest, index, tag list page, HEAD, image config,
 *                    an upload's POST, a manifest PUT), its retries and the
 *                    waits between them included: $IMGBUILD_REQUEST_TIMEOUT,
 *                    default 60;
 *   IB_NET_STALL     a transfer that moves less than IB_NET_STALL_MIN_SPEED
 *                    bytes/s for this long is cut (and retried when that
 *                    may help): $IMGBUILD_STALL_TIMEOUT, default 60;
 *   IB_NET_PROGRESS  a pull's blob downloads fail when none of them
 *                    received a byte (or completed) for this long, retries
 *                    included: $IMGBUILD_PROGRESS_TIMEOUT, default 180.
 * The environment is read on the first call (thread-safe); a value that is
 * not a whole number of seconds from 1 to 86400 is warned about once and
 * the default used. */
typedef enum
{
  IB_NET_REQUEST,
  IB_NET_STALL,
  IB_NET_PROGRESS,
} ib_net_limit_t;
#define IB_NET_STALL_MIN_SPEED 1024 /* bytes/s, averaged over IB_NET_STALL seconds */
long ib_regconf_net_limit (ib_net_limit_t which);
/* The environment variable that sets `which`: "IMGBUILD_REQUEST_TIMEOUT", ... */
const char *ib_regconf_net_limit_var (ib_net_limit_t which);

/* "90", "90s": seconds, from 1 to 86400.  Error EINVAL naming the text. */
int ib_parse_seconds (const char *s, long *out, ib_error_t *err);

/* The registries configuration file: `path` when not NULL (--registries-conf;
 * it must exist and parse), else $IMGBUILD_REGISTRIES_CONF (same), else
 * $XDG_CONFIG_HOME/imgbuild/registries.conf (~/.config when unset; used
 * when it exists, must parse), else /etc/containers/registries.conf (used
 * only when it parses; else a debug note).  Call before ib_regconf_get. */
void ib_regconf_set_conf_path (const char *path);
/* The configuration, loaded on the first call and kept for the process;
 * *out is NULL when there is none.  A load error is returned on every call. */
int ib_regconf_get (const ib_regconf_t **out, ib_error_t *err);

/* "1048576", "512k", "1M", "1MiB", "2G": bytes (k/M/G are powers of 1024;
 * "kB"/"MB"/"GB" powers of 1000).  Error EINVAL naming the text. */
int ib_parse_size (const char *s, uint64_t *out, ib_error_t *err);

#endif
