/* builder/engine/copy.c — COPY and ADD (context, stages, URLs, archives) and
 * WORKDIR. */
#include "builder/engine/engine.h"
#include "builder/engine/addsrc.h"
#include "builder/engine/fsops.h"

#include <errno.h>
#include <ftw.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* A path inside the context dir: no escape through ".." or symlinks. */
static int
context_path (build_t *b, const char *src, char **out, ib_error_t *err)
{
  return ib_root_resolve (b->context, src, true, out, err);
}

/* A COPY/ADD source as a path relative to its root: "/" and "./" in front
 * dropped, "" -> ".". */
static char *
source_rel (const char *word)
{
  while (*word == '/' || (word[0] == '.' && word[1] == '/'))
    word += word[0] == '/' ? 1 : 2;
  return xstrdup (*word ? word : ".");
}

static bool
has_wildcard (const char *s)
{
  return strpbrk (s, "*?[") != NULL;
}

/* The sources a COPY/ADD word names under `root`, relative to it: the word
 * itself, or the sorted matches of a pattern (`*`, `?`, `[...]`: Go's
 * filepath.Match, dotfiles included), leaving out what `ignore`
 * (.dockerignore) excludes.  A pattern matching nothing names no source,
 * as in BuildKit (moby/moby#26332; the classic builder's "no source files
 * were specified" is gone), but the directory above its first pattern
 * component must exist (BuildKit: "lstat ...: no such file or directory",
 * moby/buildkit#2933); a plain path is checked when it is copied. */
static int
source_matches (const char *root, const char *word, const ib_ignore_t *ignore, char ***out,
                ib_error_t *err)
{
  cleanup_free char *rel = source_rel (word);
  if (!has_wildcard (rel))
    {
      if (!ib_ignore_excluded (ignore, rel))
        ib_strv_push (out, rel);
      return 0;
    }
  cleanup_free char *pattern = xasprintf ("%s/%s", root, rel);
  glob_t g;
  int r = glob (pattern, GLOB_PERIOD, NULL, &g);
  size_t found = 0;
  if (r == 0)
    for (size_t i = 0; i < g.gl_pathc; i++)
      {
        const char *m = g.gl_pathv[i] + strlen (root) + 1;
        const char *base = strrchr (m, '/');
        base = base ? base + 1 : m;
        if (strcmp (base, ".") == 0 || strcmp (base, "..") == 0 || ib_ignore_excluded (ignore, m))
          continue;
        ib_strv_push (out, m);
        found++;
      }
  if (r == 0)
    globfree (&g);
  if (found == 0)
    {
      /* the directory the pattern is matched in: the components before
       * the first one holding a wildcard */
      char *w = strpbrk (rel, "*?[");
      while (w > rel && w[-1] != '/')
        w--;
      *w = '\0';
      cleanup_free char *dir_host = NULL;
      struct stat sb;
      if (*rel && (ib_root_resolve (root, rel, true, &dir_host, err) < 0))
        return -1;
      if (*rel && (stat (dir_host, &sb) < 0 || !S_ISDIR (sb.st_mode)))
        return ib_error_set (err, ENOENT, "%s: no such directory: %s", word, rel);
    }
  return 0;
}

/* The name a source word gives its copy in a directory destination: its
 * last component as written (a symlink's name, not its target's); NULL
 * for none ("." or a path ending in ".."). */
static char *
source_name (const char *m)
{
  cleanup_free char *p = xstrdup (m);
  size_t len = strlen (p);
  while (len > 1 && p[len - 1] == '/')
    p[--len] = '\0';
  const char *base = strrchr (p, '/');
  base = base ? base + 1 : p;
  if (!*base || strcmp (base, ".") == 0 || strcmp (base, "..") == 0)
    return NULL;
  return xstrdup (base);
}

/* --parents: what of a source's path is kept under the destination, from
 * its path under the root: all of it, or what follows the first "/./" (the
 * pivot, BuildKit's `COPY --parents ./x/./y/a.txt` keeping y/...). */
static const char *
parents_kept (const char *rel)
{
  const char *pivot = strstr (rel, "/./");
  if (pivot == NULL)
    return rel;
  pivot += 3;
  while (*pivot == '/' || (pivot[0] == '.' && pivot[1] == '/'))
    pivot += *pivot == '/' ? 1 : 2;
  return pivot;
}

static bool
is_dir (const char *path)
{
  struct stat sb;
  return stat (path, &sb) == 0 && S_ISDIR (sb.st_mode);
}

static void
ignore_freep (ib_ignore_t **p)
{
  ib_ignore_free (*p);
}

/* COPY --repair: the wheels a source put under the destination.  A
 * regular *.whl file source is `target/name` (or `target` itself); a
 * directory's *.whl files (nftw, symlinks not followed) keep their place
 * below `target`.  Host paths, pushed to *out.  nftw's callback takes no
 * context: the walk's state is in these statics (a build's steps run one
 * at a time in a process; -j runs stages in processes of their own). */
static char **repair_walk_list;
static size_t repair_walk_skip;
static const char *repair_walk_target;

static int
repair_walk_one (const char *fpath, const struct stat *sb, int type, struct FTW *ftw)
{
  (void) ftw;
  if (type == FTW_F && S_ISREG (sb->st_mode) && ib_str_has_suffix (fpath, ".whl"))
    {
      cleanup_free char *to = ib_path_join (repair_walk_target, fpath + repair_walk_skip);
      ib_strv_push (&repair_walk_list, to);
    }
  return 0;
}

static void
repair_collect (const char *src_host, const struct stat *ssb, const char *target, bool into_dir,
                const char *name, char ***out)
{
  if (S_ISREG (ssb->st_mode))
    {
      const char *n = name ? name : strrchr (src_host, '/') ? strrchr (src_host, '/') + 1 : src_host;
      if (!ib_str_has_suffix (n, ".whl"))
        return;
      cleanup_free char *to = into_dir ? ib_path_join (target, n) : xstrdup (target);
      ib_strv_push (out, to);
      return;
    }
  if (!S_ISDIR (ssb->st_mode))
    return;
  repair_walk_list = *out;
  repair_walk_skip = strlen (src_host);
  repair_walk_target = target;
  nftw (src_host, repair_walk_one, 16, FTW_PHYS);
  *out = repair_walk_list;
  repair_walk_list = NULL;
}

/* Check (and with `repair`, repair) each wheel of `paths`, host paths of
 * regular files in `st`'s tree; the wheel written in place of one keeps
 * its owner and mode. */
static int
repair_copied (build_t *b, stage_state_t *st, stage_state_t *src, char **paths,
               const char *repair, const char *excl, ib_error_t *err)
{
  size_t rootlen = strlen (st->rootfs);
  /* the source stage's libraries, as OUTPUT's audit of that stage sees
   * them: its ld.so.conf, default directories and LD_LIBRARY_PATH */
  cleanup_strv char **ld_path = stage_ld_library_path (src);
  for (char **p = paths; p && *p; p++)
    {
      /* resolved again in the tree: no component may lead out of it */
      cleanup_free char *at = NULL;
      if (ib_root_resolve (st->rootfs, *p + rootlen, false, &at, err) < 0)
        return -1;
      struct stat sb;
      if (lstat (at, &sb) < 0 || !S_ISREG (sb.st_mode))
        continue;
      cleanup_free char *out = NULL;
      if (b->opts->wheels->check_one (at, src->rootfs, ld_path, repair, excl, &out, err) < 0)
        return ib_error_prefix (err, "--repair");
      /* a rewritten wheel is a new file: the copied one's owner and mode */
      if (lchown (out, sb.st_uid, sb.st_gid) < 0 && errno != EPERM)
        return ib_error_sys (err, errno, "chown %s", out + rootlen);
      if (chmod (out, sb.st_mode & 07777) < 0)
        return ib_error_sys (err, errno, "chmod %s", out + rootlen);
    }
  return 0;
}

int
do_copy (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  const char *from = ib_instr_flag (in, "from");
  const char *chown_spec = ib_instr_flag (in, "chown");
  const char *chmod_spec = ib_instr_flag (in, "chmod");
  const char *parents_flag = ib_instr_flag (in, "parents");
  bool parents = parents_flag && strcmp (parents_flag, "true") == 0;
  bool add = in->kind == IB_I_ADD;
  for (char **f = in->flags; f && *f; f++)
    if (!ib_str_has_prefix (*f, "--from=") && !ib_str_has_prefix (*f, "--chown=")
        && !ib_str_has_prefix (*f, "--chmod=") && !ib_str_has_prefix (*f, "--exclude=")
        && !ib_str_has_prefix (*f, "--parents=") && !ib_str_has_prefix (*f, "--link=")
        && !(!add && ib_str_has_prefix (*f, "--repair="))
        && !(!add && ib_str_has_prefix (*f, "--repair-exclude="))
        && !(add && ib_str_has_prefix (*f, "--checksum=")))
      return ib_error_set (err, ENOTSUP, "%s is not supported yet", *f);
  cleanup_free char *checksum = NULL;
  if (ib_instr_flag (in, "checksum"))
    {
      if (expand (b, st, ib_instr_flag (in, "checksum"), &checksum, err) < 0)
        return -1;
      if (!ib_digest_valid (checksum))
        return ib_error_set (err, EINVAL, "--checksum=%s: expected sha256:<64 hex digits>",
                             checksum);
    }

  /* --repair=PLAT (imgbuild): the wheels copied are audited against the
   * --from source's libraries and repaired, as OUTPUT's repair= does */
  cleanup_free char *repair_x = NULL, *repair_excl_x = NULL;
  if (ib_instr_flag (in, "repair-exclude") && !ib_instr_flag (in, "repair"))
    return ib_error_set (err, EINVAL, "--repair-exclude needs --repair=PLAT");
  if (ib_instr_flag (in, "repair"))
    {
      if (!from)
        return ib_error_set (err, EINVAL, "--repair=%s needs --from: the stage or image whose "
                             "libraries are grafted", ib_instr_flag (in, "repair"));
      if (b->opts->wheels == NULL || b->opts->wheels->check_one == NULL)
        return ib_error_set (err, ENOTSUP, "--repair needs the wheel checks, which this build "
                             "was started without");
      if (expand (b, st, ib_instr_flag (in, "repair"), &repair_x, err) < 0
          || (ib_instr_flag (in, "repair-exclude")
              && expand (b, st, ib_instr_flag (in, "repair-exclude"), &repair_excl_x, err) < 0))
        return -1;
      if (b->opts->wheels->policy_check (repair_x, err) < 0)
        return ib_error_prefix (err, "--repair");
    }

  stage_state_t *src_stage = NULL;
  if (from)
    {
      cleanup_free char *fx = NULL;
      if (expand (b, st, from, &fx, err) < 0)
        return -1;
      src_stage = earlier_stage (b, st, fx);
      if (src_stage == NULL && strchr (from, '$'))
        {
          /* BuildKit finds a COPY's source stage with the global ARGs (as
           * FROM lines): ARG STAGE before the first FROM names it */
          cleanup_free char *gx = NULL;
          if (expand (b, NULL, from, &gx, NULL) == 0 && (src_stage = earlier_stage (b, st, gx)))
            {
              free (fx);
              fx = steal_pointer (&gx);
            }
        }
      bool ctx_image = false;
      const char *ctx = src_stage ? NULL : named_context (b, fx, &ctx_image);
      if (ctx) /* --build-context NAME=docker-image://REF or NAME=DIR */
        {
          src_stage = ctx_image ? image_source (b, in, ctx, err) : dir_context_source (b, fx, ctx, err);
          if (src_stage == NULL)
            return -1;
        }
      if (src_stage == NULL)
        {
          /* a stage defined later, or an index, is no image */
          int later = stage_index (b, fx);
          if (later >= 0 || strspn (fx, "0123456789") == strlen (fx))
            return ib_error_set (err, ENOENT,
                                 later >= 0 ? "--from=%s: the stage is defined after this step "
                                              "(line %d); a step can copy from earlier stages"
                                            : "--from=%s: no earlier stage of that index",
                                 fx, later >= 0 ? b->stages[later].def->instrs[0].line : 0);
          /* an image (BuildKit: "--from: image, stage or context name") */
          if ((src_stage = image_source (b, in, fx, err)) == NULL)
            return -1;
        }
    }

  /* Files of the context are 0:0 unless --chown; COPY --from keeps the
   * source stage's owners unless --chown (BuildKit: no chown option). */
  bool dir_ctx = src_stage && src_stage->def->index == DIR_CONTEXT_INDEX; /* as the context */
  ib_copy_opts_t co = { .chmod = -1, .set_owner = from == NULL || chown_spec != NULL || dir_ctx,
                        .root = st->rootfs };
  cleanup_free char *chown_x = NULL;
  if (chown_spec && expand (b, st, chown_spec, &chown_x, err) < 0)
    return -1;
  if (chmod_spec)
    {
      char *end = NULL;
      long m = strtol (chmod_spec, &end, 8);
      if (*end || m < 0 || m > 07777)
        return ib_error_set (err, EINVAL, "--chmod=%s: expected an octal mode", chmod_spec);
      co.chmod = (int) m;
    }
  /* --exclude: patterns relative to each source, as .dockerignore's */
  cleanup_strv char **ex_raw = ib_instr_flag_values (in, "exclude");
  cleanup_strv char **ex_words = NULL;
  for (char **e = ex_raw; *e; e++)
    {
      cleanup_free char *x = NULL;
      if (expand (b, st, *e, &x, err) < 0)
        return -1;
      ib_strv_push (&ex_words, x);
    }
  __attribute__ ((cleanup (ignore_freep))) ib_ignore_t *excl
      = ex_words ? ib_ignore_from_patterns (ex_words) : NULL;
  /* BuildKit's copier refuses them too ("invalid excludepatterns") */
  if (ib_ignore_check (excl, err) < 0)
    return ib_error_prefix (err, "--exclude");

  size_t n = ib_strv_len (in->args);
  cleanup_strv char **words = NULL;
  /* heredoc sources (COPY <<EOF /dest): their content, expanded as
   * BuildKit does unless the delimiter was quoted; "" for other words */
  cleanup_strv char **hdoc = NULL;
  for (size_t i = 0; i < n; i++)
    {
      char *w = NULL;
      const ib_heredoc_t *h = i + 1 < n ? ib_instr_heredoc (in, i) : NULL;
      char *content = NULL;
      if (h)
        {
          lookup_ctx_t lc = { st, &st->args };
          if (h->expand && ib_expand (h->content, escape_char (b), lookup, &lc, &content, err) < 0)
            return -1;
          if (content && expand_count (b, strlen (content), err) < 0)
            {
              free (content);
              return -1;
            }
          w = xstrdup (in->args[i]);
        }
      else if (expand (b, st, in->args[i], &w, err) < 0)
        return -1;
      ib_strv_push (&words, w);
      ib_strv_push (&hdoc, h ? (content ? content : h->content) : "");
      free (w);
      free (content);
    }
  const char *dest = words[n - 1];
  cleanup_free char *dest_abs = NULL;
  if (dest[0] == '/')
    dest_abs = xstrdup (dest);
  else
    {
      const char *wd = config_string (st->config, "WorkingDir");
      dest_abs = ib_path_join (wd && *wd ? wd : "/", dest);
    }
  /* Context sources, patterns expanded now (their content is part of the
   * key); a stage's sources are expanded when the step runs. */
  cleanup_strv char **ctx_srcs = NULL; /* per source word: "\1" separated matches */
  size_t n_sources = 0;
  /* ADD of URLs: downloaded now unless --checksum names the content (then
   * only when the step runs); the key holds the content's digest */
  cleanup_strv char **url_files = NULL; /* per source word: downloaded file, or "" */
  cleanup_strv char **url_digests = NULL;
  /* declared before the first goto: cleanup must never see them uninitialised */
  cleanup_free char *shown = NULL;
  cleanup_free char *line = NULL;
  cleanup_free char *dst_host = NULL;
  cleanup_free char *hdoc_dir = NULL;
  step_scan_t before = { 0 };
  cleanup_strv char **wheels_copied = NULL; /* --repair: host paths */
  int ret = -1;
  size_t n_copied = 0;
  for (size_t i = 0; i + 1 < n; i++)
    {
      ib_strv_push (&url_files, "");
      ib_strv_push (&url_digests, "");
    }
  for (size_t i = 0; i + 1 < n; i++)
    {
      cleanup_strv char **m = NULL;
      bool url = add && !ib_instr_heredoc (in, i) && strstr (words[i], "://");
      if (url && !checksum)
        {
          cleanup_free char *tmpf = NULL;
          int fd = ib_store_tmp_file (b->store, "add-url", &tmpf, err);
          if (fd < 0)
            goto out_urls;
          close (fd);
          char d[IB_DIGEST_LEN];
          time_t mt = 0;
          free (url_files[i]);
          url_files[i] = xstrdup (tmpf);
          if (ib_add_download (words[i], tmpf, d, &mt, err) < 0)
            goto out_urls;
          free (url_digests[i]);
          url_digests[i] = xasprintf ("%s %lld", d, (long long) mt);
        }
      if (!url && !ib_instr_heredoc (in, i) && !src_stage
          && source_matches (b->context, words[i], b->ignore, &m, err) < 0)
        goto out_urls;
      ib_buf_t j = { 0 };
      for (char **x = m; x && *x; x++)
        ib_buf_printf (&j, "%s%s", x == m ? "" : "\1", *x);
      char *joined = ib_buf_steal (&j);
      ib_strv_push (&ctx_srcs, joined);
      free (joined);
      n_sources += m ? ib_strv_len (m) : url || ib_instr_heredoc (in, i) || src_stage ? 1 : 0;
    }
  /* A directory destination is written as one: "dir/", ".", "dir/.".
   * Otherwise each source is copied to DEST itself, even when there are
   * several: BuildKit writes them in turn, the last one wins
   * (moby/buildkit#4550), unless DEST is an existing directory. */
  bool dst_is_dir = ib_str_has_suffix (dest, "/") || strcmp (dest, ".") == 0
                    || ib_str_has_suffix (dest, "/.");
  bool several = n_sources > 1 || n > 2;
  {
    ib_buf_t s = { 0 };
    for (size_t i = 0; i < n; i++)
      ib_buf_printf (&s, "%s%s", i ? " " : "", words[i]);
    shown = ib_buf_steal (&s);
  }
  char key[IB_DIGEST_LEN];
  {
    ib_buf_t t = { 0 };
    ib_buf_printf (&t, "%s\n", in->keyword);
    if (src_stage)
      ib_buf_printf (&t, "from %s\n", src_stage->key);
    if (chown_x)
      key_str (&t, "chown", chown_x);
    ib_buf_printf (&t, "chmod %d parents %d\n", co.chmod, parents);
    /* Lines only where a step copies otherwise than before (so that the
     * keys of other steps stay as they were): several sources to a
     * destination without '/' (a directory before), --parents with a
     * "/./" pivot (ignored before), a copy of another stage (symlink
     * sources' names, hard links, /dev, /proc, /sys: not known before the
     * stage's tree is). */
    if (several && !dst_is_dir)
      ib_buf_printf (&t, "several-to-dest\n");
    if (parents)
      for (size_t i = 0; i + 1 < n; i++)
        if (strstr (words[i], "/./"))
          ib_buf_printf (&t, "parents-pivot\n");
    if (src_stage)
      ib_buf_printf (&t, "stage-copy 2\n");
    for (char **e = ex_words; e && *e; e++)
      key_str (&t, "exclude", *e);
    if (repair_x)
      {
        key_str (&t, "repair", repair_x);
        key_str (&t, "repair-exclude", repair_excl_x ? repair_excl_x : "");
      }
    for (size_t i = 0; i < n; i++)
      key_str (&t, "word", words[i]);
    key_str (&t, "dest", dest_abs);
    for (size_t i = 0; i + 1 < n; i++)
      if (ib_instr_heredoc (in, i))
        {
          key_str (&t, "heredoc", ib_instr_heredoc (in, i)->name);
          key_str (&t, "content", hdoc[i]);
        }
      else if (add && strstr (words[i], "://"))
        {
          key_str (&t, "url", words[i]);
          key_str (&t, "url-content", checksum ? checksum : url_digests[i]);
        }
      else if (!src_stage)
        {
          cleanup_free char *list = xstrdup (ctx_srcs[i]);
          char *save = NULL;
          for (char *m = strtok_r (list, "\1", &save); m; m = strtok_r (NULL, "\1", &save))
            {
              key_context_path (b, &t, m, excl);
              /* a symlink source: named after the link since COPY
               * follows BuildKit there (after its target before) */
              cleanup_free char *unfollowed = NULL;
              struct stat lsb;
              if (ib_root_resolve (b->context, m, false, &unfollowed, NULL) == 0
                  && lstat (unfollowed, &lsb) == 0 && S_ISLNK (lsb.st_mode))
                key_str (&t, "source-symlink", m);
            }
          if (!*ctx_srcs[i])
            key_str (&t, "excluded", words[i]);
        }
    key_layer_format (b, &t);
    cleanup_free char *text = ib_buf_steal (&t);
    ib_cache_key (st->key, text, key);
  }
  line = xasprintf ("%s%s%s%s", from ? "--from=" : "", from ? from : "", from ? " " : "", shown);
  if (cache_lookup (b, st, key))
    {
      step_line (b, st, in->keyword, line, true, true);
      ret = 0;
      goto out;
    }
  step_line (b, st, in->keyword, line, false, true);
  if (ensure_rootfs (b, st, err) < 0 || (src_stage && ensure_rootfs (b, src_stage, err) < 0))
    goto out;
  const char *src_root = src_stage ? src_stage->rootfs : NULL;
  if (chown_x && ib_lookup_user (st->rootfs, chown_x, &co.uid, &co.gid, err) < 0)
    goto out;

  if (step_scan_begin (st, &before, NULL, err) < 0)
    goto out;
  if (ib_root_resolve (st->rootfs, dest_abs, true, &dst_host, err) < 0)
    goto out;
  for (size_t i = 0; i + 1 < n; i++)
    {
      const ib_heredoc_t *h = ib_instr_heredoc (in, i);
      if (h)
        {
          /* the heredoc as a file named by its delimiter, mode 0644 */
          if (hdoc_dir == NULL && ib_store_tmp_dir (b->store, "heredoc", &hdoc_dir, err) < 0)
            goto out;
          cleanup_free char *src_host = ib_path_join (hdoc_dir, h->name);
          if (strchr (h->name, '/') || ib_write_file_atomic (src_host, hdoc[i], strlen (hdoc[i]),
                                                             0644, err) < 0)
            {
              if (strchr (h->name, '/'))
                ib_error_set (err, EINVAL, "heredoc name '%s' holds a '/'", h->name);
              goto out;
            }
          if (ib_copy_into (src_host, dst_host, dst_is_dir, &co, err) < 0)
            goto out;
          continue;
        }
      if (add && strstr (words[i], "://"))
        {
          /* a URL: downloaded (mode 0600, Last-Modified as mtime), never
           * extracted; a directory destination gets the URL's file name */
          char d[IB_DIGEST_LEN];
          time_t mt = 0;
          if (!*url_files[i])
            {
              cleanup_free char *tmpf = NULL;
              int fd = ib_store_tmp_file (b->store, "add-url", &tmpf, err);
              if (fd < 0)
                goto out;
              close (fd);
              free (url_files[i]);
              url_files[i] = xstrdup (tmpf);
              if (ib_add_download (words[i], tmpf, d, &mt, err) < 0)
                goto out;
              if (checksum && strcmp (checksum, d) != 0)
                {
                  ib_error_set (err, EINVAL, "%s: checksum mismatch: --checksum=%s, the content is %s",
                                words[i], checksum, d);
                  goto out;
                }
            }
          else
            mt = (time_t) strtoll (strchr (url_digests[i], ' ') + 1, NULL, 10);
          if (mt > 0)
            {
              struct timespec ts[2] = { { mt, 0 }, { mt, 0 } };
              utimensat (AT_FDCWD, url_files[i], ts, 0);
            }
          cleanup_free char *base = ib_add_url_basename (words[i]);
          cleanup_free char *target = dst_is_dir ? ib_path_join (dst_host, base) : xstrdup (dst_host);
          co.name = base; /* into an existing directory: the URL's name */
          int r_url = ib_copy_into (url_files[i], target, false, &co, err);
          co.name = NULL;
          if (r_url < 0)
            goto out;
          continue;
        }
      cleanup_strv char **srcs = NULL;
      if (src_stage)
        {
          if (source_matches (src_root, words[i], NULL, &srcs, err) < 0)
            goto out;
        }
      else
        {
          cleanup_free char *list = xstrdup (ctx_srcs[i]);
          char *save = NULL;
          for (char *m = strtok_r (list, "\1", &save); m; m = strtok_r (NULL, "\1", &save))
            ib_strv_push (&srcs, m);
          if (srcs == NULL && !has_wildcard (words[i]))
            {
              ib_error_set (err, ENOENT, "%s: no such file or directory in the build context "
                            "(excluded by .dockerignore)", words[i]);
              goto out;
            }
        }
      for (char **m = srcs; m && *m; m++)
        {
          cleanup_free char *src_host = NULL;
          int r = src_root ? ib_root_resolve (src_root, *m, true, &src_host, err)
                           : context_path (b, *m, &src_host, err);
          if (r < 0)
            goto out;
          struct stat ssb;
          if (stat (src_host, &ssb) < 0)
            {
              ib_error_set (err, ENOENT, "%s: no such file or directory in %s", *m,
                            from ? "that stage" : "the build context");
              goto out;
            }
          const char *base = src_root ? src_root : b->context;
          const char *rel_in_root = src_host + strlen (base);
          while (*rel_in_root == '/')
            rel_in_root++;
          ib_path_filter_t filter = { .ignore = src_root ? NULL : b->ignore,
                                      .ignore_base = src_root ? NULL : rel_in_root,
                                      .exclude = excl };
          co.filter = &filter;
          cleanup_free char *target = NULL;
          bool into_dir = dst_is_dir;
          if (parents && strcmp (*m, ".") != 0)
            {
              /* --parents: the source's path under its root is kept,
               * from the pivot on when the word has one */
              cleanup_free char *rel = xstrdup (parents_kept (*m));
              char *slash = strrchr (rel, '/');
              if (S_ISDIR (ssb.st_mode))
                target = ib_path_join (dst_host, rel);
              else
                {
                  if (slash)
                    *slash = '\0';
                  target = slash ? ib_path_join (dst_host, rel) : xstrdup (dst_host);
                }
              into_dir = true;
            }
          if (add && S_ISREG (ssb.st_mode) && ib_add_is_archive (src_host))
            {
              /* ADD of a local tar archive: its contents go into DEST */
              r = ib_add_extract (src_host, dst_host, err);
              co.filter = NULL;
              if (r < 0)
                goto out;
              continue;
            }
          /* a second file to one path (directories merge their contents) */
          if (!into_dir && !S_ISDIR (ssb.st_mode) && n_copied++ == 1 && !is_dir (dst_host))
            ib_warn ("%s %s: several sources to %s, which does not end with '/': each is "
                     "written to %s in turn (as BuildKit does); end it with '/' to copy "
                     "them into a directory", in->keyword, shown, dest, dest);
          /* a symlink source: its target's content under the link's name */
          cleanup_free char *name = source_name (*m);
          co.name = name;
          r = ib_copy_into (src_host, target ? target : dst_host, into_dir, &co, err);
          co.filter = NULL;
          co.name = NULL;
          if (r < 0)
            goto out;
          if (repair_x)
            {
              const char *to = target ? target : dst_host;
              bool in_dir = into_dir || is_dir (to);
              repair_collect (src_host, &ssb, to, S_ISDIR (ssb.st_mode) || in_dir, name,
                              &wheels_copied);
            }
        }
    }
  if (repair_x && repair_copied (b, st, src_stage, wheels_copied, repair_x, repair_excl_x, err) < 0)
    goto out;
  {
    cleanup_free char *created_by = xasprintf ("%s %s", in->keyword, shown);
    ret = commit_layer (b, st, &before, created_by, err);
    if (ret == 0)
      cache_record (b, st, key);
  }
out:
  if (hdoc_dir)
    ib_rm_rf (hdoc_dir, NULL); /* a temp directory: best effort */
  step_scan_free (&before);
out_urls:
  for (char **u = url_files; u && *u; u++)
    if (**u)
      unlink (*u);
  return ret;
}

int
do_workdir (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  cleanup_free char *dir = NULL;
  if (expand (b, st, in->text, &dir, err) < 0)
    return -1;
  const char *cur = config_string (st->config, "WorkingDir");
  cleanup_free char *abs = dir[0] == '/' ? xstrdup (dir) : ib_path_join (cur && *cur ? cur : "/", dir);
  char key[IB_DIGEST_LEN];
  {
    ib_buf_t t = { 0 };
    key_str (&t, "WORKDIR", abs);
    key_layer_format (b, &t);
    cleanup_free char *text = ib_buf_steal (&t);
    ib_cache_key (st->key, text, key);
  }
  if (cache_lookup (b, st, key))
    {
      step_line (b, st, "WORKDIR", abs, true, true);
      return 0;
    }
  step_line (b, st, "WORKDIR", abs, false, true);
  if (ensure_rootfs (b, st, err) < 0)
    return -1;
  json_object_set_new (config_section (st->config), "WorkingDir", json_string (abs));
  step_scan_t before = { 0 };
  if (step_scan_begin (st, &before, NULL, err) < 0)
    return -1;
  cleanup_free char *host = NULL;
  /* after USER, the directories made are that user's (BuildKit) */
  const char *user = config_string (st->config, "User");
  ib_copy_opts_t owner = { .set_owner = user && *user };
  int r = owner.set_owner ? ib_lookup_user (st->rootfs, user, &owner.uid, &owner.gid, err) : 0;
  if (r == 0)
    r = ib_root_resolve (st->rootfs, abs, true, &host, err);
  if (r == 0)
    r = ib_mkdir_p_owned (host, &owner, err);
  cleanup_free char *created_by = xasprintf ("WORKDIR %s", abs);
  if (r == 0)
    r = commit_layer (b, st, &before, created_by, err);
  step_scan_free (&before);
  if (r == 0)
    cache_record (b, st, key);
  return r;
}
