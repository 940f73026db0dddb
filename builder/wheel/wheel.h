/* builder/wheel/wheel.h — Python wheels: verification (PEP 427, the binary
 * distribution format), the manylinux audit (PEP 600, following
 * auditwheel's algorithm and its policy table, data/manylinux-policy.json,
 * embedded in the binary) and repair (grafting external libraries).
 *
 * A wheel is opened once (ib_wheel_open): the zip is read with libarchive,
 * every member hashed and extracted into a private temporary directory, and
 * checked against RECORD.  The audit then reads the extracted ELF objects
 * with libelf (elfutils) and resolves their DT_NEEDED entries as the
 * dynamic loader (and auditwheel's lddtree) would on this host.
 *
 * Specifications: PEP 427 (wheel 1.0: file name, .dist-info, RECORD;
 * PEP 491's deferred wheel 1.9 changes are not applied, Wheel-Version 1.x
 * is accepted), PEP 425 (compressed tag sets), PEP 600 (manylinux_x_y
 * tags and the policy priorities), PEP 503 (name normalization).
 * Memory: the zip is streamed (64 KiB buffers), never held whole.
 */
#ifndef IB_BUILDER_WHEEL_WHEEL_H
#define IB_BUILDER_WHEEL_WHEEL_H

#include "common/error.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* The parts of a wheel file name, PEP 427 "File name convention":
 * {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl
 * Tags may be compressed tag sets ("cp311.cp312", "manylinux_2_17_x86_64.manylinux2014_x86_64"). */
typedef struct ib_wheel_name
{
  char *distribution, *version, *build; /* build: NULL when absent */
  char *python, *abi, *platform;
} ib_wheel_name_t;

/* Parse `filename` (a base name, "foo-1.0-cp311-cp311-linux_x86_64.whl").
 * Fails (EINVAL) when it does not follow PEP 427: 5 or 6 dash-separated
 * parts, a build tag starting with a digit, components of [A-Za-z0-9_.+!]
 * (version) or [A-Za-z0-9_.] (the rest), the suffix ".whl".  *out is filled
 * with allocated strings; release them with ib_wheel_name_clear. */
int ib_wheel_parse_name (const char *filename, ib_wheel_name_t *out, ib_error_t *err);
void ib_wheel_name_clear (ib_wheel_name_t *n);

typedef struct ib_wheel ib_wheel_t;

/* Open and verify the wheel at `path` (PEP 427 "The .dist-info directory",
 * "Signed wheel files"): the zip is readable, its member names are relative
 * and free of "..", no member appears twice, exactly one
 * {distribution}-{version}.dist-info directory holds WHEEL (Wheel-Version
 * 1.x, Tag lines equal to the file name's expanded tags), METADATA
 * (Metadata-Version, Name, Version) and RECORD; every member but RECORD
 * (and RECORD.jws / RECORD.p7s) is listed in RECORD with a sha256 (or
 * sha384 / sha512) urlsafe-base64 digest and a size that match its bytes,
 * and RECORD lists no member that is absent (sha384 / sha512 digests are
 * checked in a second pass over the zip).  The ELF objects (by their
 * first bytes) and the .dist-info files are extracted, with their paths,
 * into a temporary directory under $TMPDIR (or /var/tmp), removed by
 * ib_wheel_close; other members are only hashed.  Errors name the wheel and the member:
 * "wheel foo.whl: RECORD: hash mismatch for pkg/mod.so". */
int ib_wheel_open (const char *path, ib_wheel_t **out, ib_error_t *err);
void ib_wheel_close (ib_wheel_t *w); /* NULL ok */

/* The parsed file name of an open wheel; owned by `w`. */
const ib_wheel_name_t *ib_wheel_get_name (const ib_wheel_t *w);
/* Number of members (files) the wheel holds. */
size_t ib_wheel_member_count (const ib_wheel_t *w);

typedef struct ib_wheel_audit ib_wheel_audit_t;

typedef struct ib_wheel_audit_opts
{
  /* auditwheel's allow_graft: false for `show` (a wheel that needs a
   * library outside a policy's whitelist is held at that policy), true
   * for `repair` (such libraries can be grafted). */
  bool allow_graft;
  /* `repair --plat`'s policy without the architecture
   * ("manylinux_2_17"), or NULL: limits the tag to policies that need no
   * more grafted libraries than that one. */
  const char *requested_base;
  /* fnmatch patterns of sonames / library paths never resolved nor
   * grafted (`--exclude`), NULL-terminated or NULL.  The NVIDIA driver
   * (libcuda.so*, libnvidia-*.so*) is always excluded. */
  char *const *exclude;
  /* Resolve libraries inside this directory (a build stage's root
   * filesystem: its /etc/ld.so.conf, default directories and absolute
   * RPATH entries, absolute symlinks taken relative to it; the host's
   * LD_LIBRARY_PATH and the current directory are never read: empty and
   * relative RPATH/RUNPATH entries, which ld.so takes from the current
   * directory, are skipped), or NULL: this host. */
  const char *root;
  /* The LD_LIBRARY_PATH the objects would be loaded with, as directories
   * (host paths: for a stage, the entries of its image config's
   * LD_LIBRARY_PATH, each already resolved inside `root` by the caller),
   * NULL-terminated; searched in order where lddtree searches
   * LD_LIBRARY_PATH: after RPATH, before /etc/ld.so.conf and the default
   * directories (as ld.so does).  Entries that are not directories are
   * skipped.  NULL: none when `root` is set; without `root`, this
   * process's $LD_LIBRARY_PATH (auditwheel on this host).  Borrowed for
   * the call; never read from the process environment when set. */
  char *const *ld_library_path;
} ib_wheel_audit_opts_t;

/* Audit an open wheel against the embedded manylinux policies (PEP 600), as
 * auditwheel 6.x's analyze_wheel_abi does: for each ELF object, the
 * versioned symbols it needs (.gnu.version_r) grouped by prefix (GLIBC,
 * GLIBCXX, CXXABI, GCC, ZLIB, ...) are checked as set membership against
 * each policy's symbol_versions; DT_NEEDED entries are resolved (RPATH,
 * LD_LIBRARY_PATH (opts->ld_library_path), RUNPATH, /etc/ld.so.conf,
 * default directories) and
 * those outside a policy's lib_whitelist are that policy's external
 * libraries; undefined symbols in a policy's blacklist hold it back; an
 * x86-64 ISA level above the baseline (GNU property note), PyFPE_jbuf,
 * libraries in purelib count as auditwheel counts them.  The result is the
 * highest-priority policy satisfied.  A wheel with no ELF object is
 * "pure": *out is still set and ib_wheel_audit_tag returns NULL.
 * Fails for a wheel auditwheel refuses (ELF objects under purelib/, a
 * non-glibc libc, an architecture without policies). */
int ib_wheel_audit (ib_wheel_t *w, const ib_wheel_audit_opts_t *opts, ib_wheel_audit_t **out,
                    ib_error_t *err);
void ib_wheel_audit_free (ib_wheel_audit_t *a); /* NULL ok */

/* The overall platform tag ("manylinux_2_17_x86_64", "linux_x86_64"), or
 * NULL for a pure wheel.  Owned by `a`. */
const char *ib_wheel_audit_tag (const ib_wheel_audit_t *a);

/* Text in the shape of `auditwheel show` (paragraphs wrapped at 70
 * columns; sets printed sorted).  Caller frees. */
char *ib_wheel_audit_show (const ib_wheel_audit_t *a);

/* The JSON object of `auditwheel show --json` (version 1: wheel, pure,
 * overall_tag, sym_tag, pyfpe, ucs2, unsupported_isa, versioned_symbols,
 * external_libs, policy_upgrades).  Caller owns the reference. */
json_t *ib_wheel_audit_json (const ib_wheel_audit_t *a);

/* The embedded policy table (bytes of data/manylinux-policy.json). */
const char *ib_wheel_policy_json (size_t *len);

typedef struct ib_wheel_repair_opts
{
  const char *plat;        /* "manylinux_2_17_x86_64" (a policy name or alias) */
  const char *out_dir;     /* where the repaired wheel is written (made if missing) */
  char *const *exclude;    /* see ib_wheel_audit_opts_t.exclude */
  const char *patchelf;    /* the patchelf program; NULL: "patchelf" from $PATH */
  const char *root;        /* see ib_wheel_audit_opts_t.root */
  char *const *ld_library_path; /* see ib_wheel_audit_opts_t.ld_library_path */
} ib_wheel_repair_opts_t;

/* auditwheel repair: audit `path` with grafting allowed; fail when the
 * requested policy is above what the versioned symbols, blacklist or ISA
 * allow; copy every external library (not whitelisted by the requested
 * policy) into "<distribution>.libs/" as "<base>-<8 hex of its sha256>.<ext>",
 * set its soname, rewrite the DT_NEEDED entries that named it and set
 * RPATH "$ORIGIN/<relative path to .libs>" on each ELF that needs one
 * (patchelf, one change per call); replace the linux_<arch> platform
 * tag by the policy's name and aliases in the file name and WHEEL; rewrite
 * RECORD; write the zip (entries sorted, .dist-info last, RECORD the very
 * last; mode 0644 or 0755; the MS-DOS time fields in UTC, whatever TZ says:
 * SOURCE_DATE_EPOCH's when set, so the output is reproducible, else each
 * member's as the wheel stored them, and for grafted libraries and the new
 * RECORD the wheel's newest member's, so the same input gives the same
 * bytes; TZ is neither read for this nor set).  *out_path (caller frees) is the new wheel's
 * path.  A wheel that needs no grafting is still retagged and rewritten. */
int ib_wheel_repair (const char *path, const ib_wheel_repair_opts_t *opts, char **out_path,
                     ib_error_t *err);

/* The build's hook for a wheel an OUTPUT wrote: open (verify) and audit
 * `path`, log "wheel NAME: verified, N files; platform tag TAG" (or "pure
 * Python").  Fails on a wheel that does not verify. */
int ib_wheel_check_output (const char *path, ib_error_t *err);

/* The hook of `COPY --repair=PLAT`: one wheel `path` (a regular *.whl
 * file the COPY wrote), verified and audited with the libraries of `root`
 * (the --from stage's root filesystem) and `ld_library_path` (its
 * LD_LIBRARY_PATH's directories, host paths, as ib_wheel_check_copied
 * takes them; NULL: none), logged as ib_wheel_check_copied
 * does, then, when `repair` is set (a --plat value; NULL or "": check
 * only) and the wheel is not pure Python, repaired in place: written
 * beside `path` under its new name, `path` removed when the name changed.
 * `repair_exclude`: ':'-separated --exclude patterns, or NULL.  On
 * success *out_path (caller frees) is where the wheel now is (`path`
 * itself when it was not rewritten).  A wheel that fails is removed and
 * the error names it. */
int ib_wheel_check_one (const char *path, const char *root, char *const *ld_library_path,
                        const char *repair, const char *repair_exclude, char **out_path,
                        ib_error_t *err);

/* The hook of `OUTPUT type=local`: after ib_copy_into (src, dest, true)
 * copied `src` (a file, or a directory whose contents were merged into
 * `dest`), check every regular *.whl file it copied, at its place under
 * `dest` (sorted, files before subdirectories): verify and audit it (libraries
 * resolved in `root`, the stage's root filesystem; NULL: this host; and in
 * `ld_library_path`, the stage's LD_LIBRARY_PATH as
 * ib_wheel_audit_opts_t.ld_library_path says, or NULL) and log its tag.  With `repair` (a --plat value, or NULL / ""), every platform
 * wheel is then repaired in place: the repaired wheel is written beside
 * it and the original removed when the name changed; `repair_exclude` is
 * a ':'-separated list of --exclude patterns (or NULL).  Fails on the first
 * wheel that does not verify or cannot be repaired (so a corrupt wheel
 * fails the build). */
int ib_wheel_check_copied (const char *src, const char *dest, const char *root,
                           char *const *ld_library_path, const char *repair,
                           const char *repair_exclude, ib_error_t *err);

/* Whether `plat` ("manylinux_2_17_x86_64", or an alias such as
 * "manylinux2014_x86_64") names a manylinux policy of the embedded table
 * (PEP 600) for the architecture its suffix names; linux_<arch> is not one.
 * Returns 0, or -1 with EINVAL ("PLAT: no manylinux policy of that name"). */
int ib_wheel_policy_check (const char *plat, ib_error_t *err);

/* The hook of `OUTPUT type=local,require=PLAT`, run on `src` (a file or a
 * directory in the stage's root filesystem `root`) BEFORE anything is
 * copied: every regular *.whl under it (sorted) is verified and audited
 * without grafting (as `auditwheel show`: libraries resolved in `root`
 * and `ld_library_path`, as ib_wheel_check_copied's),
 * and must satisfy `plat`: the audit's overall policy has at least plat's
 * priority (PEP 600; a pure wheel satisfies any).  Nothing is repaired.
 * Fails (EINVAL) when `plat` names no policy, or when any wheel falls short:
 * one message names each such wheel, its tag and what holds it back
 * (versioned symbols above plat's, libraries off plat's whitelist,
 * black-listed symbols, UCS2, PyFPE_jbuf, ISA extensions); a wheel that
 * does not verify fails with ib_wheel_open's error. */
int ib_wheel_check_required (const char *src, const char *root, char *const *ld_library_path,
                             const char *plat, ib_error_t *err);

#endif
