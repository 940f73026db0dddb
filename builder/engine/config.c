/* builder/engine/config.c — the config-only instructions (ENV, LABEL, CMD,
 * ENTRYPOINT, USER, HEALTHCHECK, ...), ARG with the platform ARGs, and their
 * cache step. */
#include "builder/engine/engine.h"

#include <errno.h>
#include <string.h>

json_t *
argv_json (build_t *b, stage_state_t *st, const ib_instr_t *in)
{
  (void) b;
  json_t *a = json_array ();
  if (in->json_form)
    for (char **s = in->args; s && *s; s++)
      json_array_append_new (a, json_string (*s));
  else
    {
      for (char **s = st->shell; s && *s; s++)
        json_array_append_new (a, json_string (*s));
      json_array_append_new (a, json_string (in->text));
    }
  return a;
}

/* A Go duration as Docker's HEALTHCHECK flags take it ("30s", "1m30s",
 * "500ms", "1.5h"; units ns us µs ms s m h), in nanoseconds. */
static int
parse_duration (const char *flag, const char *v, int64_t *ns, ib_error_t *err)
{
  static const struct { const char *unit; double ns; } units[] = {
    { "ns", 1 }, { "us", 1e3 }, { "\xc2\xb5s", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
    { "m", 60e9 }, { "h", 3600e9 },
  };
  double total = 0;
  const char *s = v;
  if (*s == '\0')
    goto bad;
  if (strcmp (s, "0") == 0)
    {
      *ns = 0;
      return 0;
    }
  while (*s)
    {
      char *end;
      double n = strtod (s, &end);
      if (end == s || n < 0)
        goto bad;
      s = end;
      size_t best = 0;
      int found = -1;
      for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        {
          size_t l = strlen (units[i].unit);
          if (strncmp (s, units[i].unit, l) == 0 && l > best)
            {
              best = l;
              found = (int) i;
            }
        }
      if (found < 0)
        goto bad;
      total += n * units[found].ns;
      s += best;
    }
  if (total > 9.2e18)
    goto bad;
  *ns = (int64_t) total;
  if (*ns != 0 && *ns < 1000000)
    return ib_error_set (err, EINVAL, "HEALTHCHECK --%s=%s: at least 1ms, or 0", flag, v);
  return 0;
bad:
  return ib_error_set (err, EINVAL,
                       "HEALTHCHECK --%s=%s: expected a duration such as 30s, 1m30s or 500ms",
                       flag, v);
}

static int
do_healthcheck (build_t *b, stage_state_t *st, const ib_instr_t *in, json_t *c, ib_error_t *err)
{
  json_t *hc = json_object ();
  json_t *test = json_array ();
  json_object_set_new (hc, "Test", test);
  if (!in->json_form && in->args)
    json_array_append_new (test, json_string ("NONE"));
  else if (in->json_form)
    {
      json_array_append_new (test, json_string ("CMD"));
      for (char **a = in->args; a && *a; a++)
        json_array_append_new (test, json_string (*a));
    }
  else
    {
      json_array_append_new (test, json_string ("CMD-SHELL"));
      json_array_append_new (test, json_string (in->text));
    }
  static const struct { const char *flag, *key; } durations[] = {
    { "interval", "Interval" }, { "timeout", "Timeout" }, { "start-period", "StartPeriod" },
    { "start-interval", "StartInterval" },
  };
  for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++)
    {
      const char *raw = ib_instr_flag (in, durations[i].flag);
      if (raw == NULL)
        continue;
      cleanup_free char *v = NULL;
      int64_t ns = 0;
      if (expand (b, st, raw, &v, err) < 0 || parse_duration (durations[i].flag, v, &ns, err) < 0)
        {
          json_decref (hc);
          return -1;
        }
      if (ns)
        json_object_set_new (hc, durations[i].key, json_integer (ns));
    }
  const char *raw = ib_instr_flag (in, "retries");
  if (raw)
    {
      cleanup_free char *v = NULL;
      char *end;
      if (expand (b, st, raw, &v, err) < 0)
        {
          json_decref (hc);
          return -1;
        }
      errno = 0;
      long n = strtol (v, &end, 10);
      if (*v == '\0' || *end || errno || n < 0 || n > 1000000)
        {
          json_decref (hc);
          return ib_error_set (err, EINVAL, "HEALTHCHECK --retries=%s: expected a number", v);
        }
      if (n)
        json_object_set_new (hc, "Retries", json_integer (n));
    }
  json_object_set_new (c, "Healthcheck", hc);
  return 0;
}

int
do_config (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  json_t *c = config_section (st->config);
  cleanup_free char *created_by = xasprintf ("%s %s", in->keyword, in->text ? in->text : "");
  switch (in->kind)
    {
    case IB_I_ENV:
      for (size_t i = 0; i < in->n_kvs; i++)
        {
          cleanup_free char *v = NULL;
          if (expand (b, st, in->kvs[i].raw ? in->kvs[i].raw : "", &v, err) < 0)
            return ib_error_prefix (err, "%s", in->kvs[i].key);
          config_env_set (st->config, in->kvs[i].key, v);
        }
      break;
    case IB_I_LABEL:
      {
        json_t *labels = json_object_get (c, "Labels");
        if (!json_is_object (labels))
          {
            labels = json_object ();
            json_object_set_new (c, "Labels", labels);
          }
        for (size_t i = 0; i < in->n_kvs; i++)
          {
            cleanup_free char *k = NULL, *v = NULL;
            if (expand (b, st, in->kvs[i].key, &k, err) < 0
                || expand (b, st, in->kvs[i].raw ? in->kvs[i].raw : "", &v, err) < 0)
              return -1;
            json_object_set_new (labels, k, json_string (v));
          }
        break;
      }
    case IB_I_USER:
      {
        cleanup_free char *u = NULL;
        if (expand (b, st, in->text, &u, err) < 0)
          return -1;
        json_object_set_new (c, "User", json_string (u));
        break;
      }
    case IB_I_CMD:
      json_object_set_new (c, "Cmd", argv_json (b, st, in));
      st->cmd_set = true;
      break;
    case IB_I_ENTRYPOINT:
      json_object_set_new (c, "Entrypoint", argv_json (b, st, in));
      /* Dockerfile: ENTRYPOINT resets a CMD inherited from the base image,
       * not one set earlier in this stage (BuildKit's cmd.IsSet). */
      if (!st->cmd_set)
        json_object_del (c, "Cmd");
      break;
    case IB_I_EXPOSE:
    case IB_I_VOLUME:
      {
        const char *key = in->kind == IB_I_EXPOSE ? "ExposedPorts" : "Volumes";
        json_t *o = json_object_get (c, key);
        if (!json_is_object (o))
          {
            o = json_object ();
            json_object_set_new (c, key, o);
          }
        for (char **w = in->args; w && *w; w++)
          {
            cleanup_free char *x = NULL;
            if (expand (b, st, *w, &x, err) < 0)
              return -1;
            cleanup_free char *k = NULL;
            if (in->kind == IB_I_EXPOSE)
              {
                /* checked after expansion (EXPOSE $PORT), as BuildKit does */
                if (ib_expose_key (x, &k, err) < 0)
                  return -1;
              }
            else
              k = xstrdup (x);
            json_object_set_new (o, k, json_object ());
          }
        break;
      }
    case IB_I_STOPSIGNAL:
      {
        cleanup_free char *s = NULL;
        if (expand (b, st, in->text, &s, err) < 0 || ib_stop_signal (s, NULL, err) < 0)
          return -1;
        json_object_set_new (c, "StopSignal", json_string (s));
        break;
      }
    case IB_I_MAINTAINER:
      json_object_set_new (st->config, "author", json_string (in->text));
      break;
    case IB_I_HEALTHCHECK:
      if (do_healthcheck (b, st, in, c, err) < 0)
        return -1;
      free (created_by);
      created_by = in->json_form || !in->args
                       ? xasprintf ("HEALTHCHECK CMD %s", in->text)
                       : xstrdup ("HEALTHCHECK NONE");
      break;
    case IB_I_ONBUILD:
      {
        json_t *o = json_object_get (c, "OnBuild");
        if (!json_is_array (o))
          {
            o = json_array ();
            json_object_set_new (c, "OnBuild", o);
          }
        json_array_append_new (o, json_string (in->text));
        break;
      }
    case IB_I_SHELL:
      if (!in->json_form || ib_strv_len (in->args) == 0)
        return ib_error_set (err, EINVAL, "SHELL needs the JSON form, e.g. [\"/bin/bash\", \"-c\"]");
      ib_strv_free (st->shell);
      st->shell = ib_strv_dup (in->args);
      /* Docker and BuildKit record it (config Shell): images and stages
       * built FROM this one inherit it. */
      {
        json_t *a = json_array ();
        for (char **w = in->args; *w; w++)
          json_array_append_new (a, json_string (*w));
        json_object_set_new (c, "Shell", a);
      }
      break;
    default:
      return ib_error_set (err, ENOTSUP, "not supported yet");
    }
  add_history (b, st, created_by, true);
  return 0;
}

/* BuildKit's automatic platform ARGs (Dockerfile reference, "Automatic
 * platform ARGs in the global scope"): BUILD* name the platform imgbuild
 * runs on, TARGET* the build's --platform (default: the same).  They are
 * set in the global scope without a declaration (so FROM --platform=
 * $BUILDPLATFORM works) and reach a stage through `ARG NAME` without a
 * value, as any global ARG. */
void
platform_args (build_t *b)
{
  const char *os, *arch, *variant;
  ib_host_platform (&os, &arch, &variant);
  cleanup_free char *tos = NULL, *tarch = NULL, *tvariant = NULL;
  if (b->opts->platform == NULL
      || ib_platform_parse (b->opts->platform, &tos, &tarch, &tvariant, NULL) < 0)
    {
      /* checked by the CLI */
      tos = xstrdup (os), tarch = xstrdup (arch), tvariant = variant ? xstrdup (variant) : NULL;
    }
  const char *sides[2][4] = { { "BUILD", os, arch, variant }, { "TARGET", tos, tarch, tvariant } };
  for (int i = 0; i < 2; i++)
    {
      cleanup_free char *plat = ib_platform_string (sides[i][1], sides[i][2], sides[i][3]);
      const char *vals[4] = { plat, sides[i][1], sides[i][2], sides[i][3] ? sides[i][3] : "" };
      const char *names[4] = { "PLATFORM", "OS", "ARCH", "VARIANT" };
      for (int k = 0; k < 4; k++)
        {
          cleanup_free char *name = xasprintf ("%s%s", sides[i][0], names[k]);
          vars_set (&b->auto_args, name, vals[k]);
          vars_set (&b->global_args, name, vals[k]);
        }
    }
}

/* Docker's predefined ARGs: given with --build-arg they reach every RUN's
 * environment without an ARG instruction, and (as in BuildKit) stay out of
 * the history and of the cache key, as proxy settings differ between
 * machines that should share a cache. */
bool
is_proxy_arg (const char *name)
{
  static const char *const names[] = { "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy",
                                       "FTP_PROXY", "ftp_proxy", "NO_PROXY", "no_proxy",
                                       "ALL_PROXY", "all_proxy", NULL };
  for (const char *const *n = names; *n; n++)
    if (strcmp (*n, name) == 0)
      return true;
  return false;
}

int
do_arg (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  ib_buf_t hist = { 0 };
  for (size_t i = 0; i < in->n_kvs; i++)
    {
      const char *name = in->kvs[i].key;
      bool found = false;
      const char *v = NULL;
      for (size_t k = 0; k < b->build_args.n; k++)
        if (strcmp (b->build_args.names[k], name) == 0)
          {
            v = b->build_args.values[k];
            b->build_arg_used[k] = true;
            found = true;
          }
      cleanup_free char *value = NULL;
      if (st)
        {
          /* history: "ARG NAME" or "ARG NAME=default" as BuildKit writes it */
          ib_buf_printf (&hist, "%s%s", i ? " " : "ARG ", name);
          if (in->kvs[i].raw)
            {
              cleanup_free char *d = NULL;
              if (expand (b, st, in->kvs[i].raw, &d, err) < 0)
                {
                  ib_buf_free (&hist);
                  return ib_error_prefix (err, "%s", name);
                }
              ib_buf_printf (&hist, "=%s", d);
            }
        }
      if (!found && in->kvs[i].raw)
        {
          if (expand (b, st, in->kvs[i].raw, &value, err) < 0)
            {
              ib_buf_free (&hist);
              return ib_error_prefix (err, "%s", name);
            }
          v = value;
        }
      else if (!found && st)
        v = vars_get (&b->global_args, name, NULL); /* re-declared global ARG */
      if (!found && !in->kvs[i].raw && v == NULL)
        v = vars_get (&b->auto_args, name, NULL); /* ARG TARGETOS: the automatic value */
      vars_set (st ? &st->args : &b->global_args, name, v ? v : "");
    }
  if (st)
    {
      /* An empty-layer entry, as BuildKit records; its time is the previous
       * entry's (an ARG makes nothing), so that a rebuild from the cache,
       * whose steps keep their recorded times, gives the same image. */
      json_t *h = json_object_get (st->config, "history");
      size_t n = json_is_array (h) ? json_array_size (h) : 0;
      const char *prev = n ? json_string_value (json_object_get (json_array_get (h, n - 1),
                                                                 "created"))
                           : NULL;
      cleanup_free char *text = ib_buf_steal (&hist);
      add_history_at (b, st, text, true, prev);
    }
  return 0;
}

/* ------------------------------------------------------------------ */

/* A config-only step (ENV, LABEL, CMD, ...) has been applied to the
 * config; its key is the result (config without history, and the SHELL)
 * plus the instruction as written.  A hit takes the recorded config, whose
 * history keeps the times of the build that ran the step, so a rebuild
 * without changes gives the same image digest. */
void
config_step_cache (build_t *b, stage_state_t *st, const ib_instr_t *in)
{
  json_t *c = json_copy (st->config);
  json_object_del (c, "history");
  json_object_del (c, "created");
  cleanup_free char *cj = json_dumps (c, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref (c);
  ib_buf_t t = { 0 };
  key_str (&t, in->keyword, in->text ? in->text : "");
  for (size_t i = 0; i < in->n_kvs; i++)
    {
      key_str (&t, "k", in->kvs[i].key);
      key_str (&t, "v", in->kvs[i].raw ? in->kvs[i].raw : "");
    }
  for (char **f = in->flags; f && *f; f++)
    key_str (&t, "flag", *f);
  key_str (&t, "config", cj);
  for (char **a = st->shell; a && *a; a++)
    key_str (&t, "shell", *a);
  cleanup_free char *text = ib_buf_steal (&t);
  char key[IB_DIGEST_LEN];
  ib_cache_key (st->key, text, key);
  cleanup_free char *shown = in->text ? xstrdup (in->text) : xstrdup ("");
  if (cache_lookup (b, st, key))
    step_line (b, st, in->keyword, shown, true, false);
  else
    {
      step_line (b, st, in->keyword, shown, false, false);
      cache_record (b, st, key);
    }
}
