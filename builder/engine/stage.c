/* builder/engine/stage.c — the state of a stage as the build goes: variables
 * (ARG, --build-arg), word expansion with its budgets, the image config's
 * Env and history, and the user namespace a build enters first. */
#include "builder/engine/engine.h"

#include <errno.h>
#include <string.h>

const char *
vars_get (const vars_t *v, const char *name, bool *found)
{
  json_t *at = v->idx ? json_object_get (v->idx, name) : NULL;
  if (found)
    *found = at != NULL;
  return at ? v->values[json_integer_value (at)] : NULL;
}

void
vars_set (vars_t *v, const char *name, const char *value)
{
  json_t *at = v->idx ? json_object_get (v->idx, name) : NULL;
  if (at)
    {
      size_t i = (size_t) json_integer_value (at);
      free (v->values[i]);
      v->values[i] = xstrdup (value);
      return;
    }
  if (v->n == v->cap)
    {
      v->cap = v->cap ? 2 * v->cap : 8;
      v->names = xrealloc (v->names, v->cap * sizeof (char *));
      v->values = xrealloc (v->values, v->cap * sizeof (char *));
    }
  if (v->idx == NULL)
    v->idx = json_object ();
  json_object_set_new_nocheck (v->idx, name, json_integer ((json_int_t) v->n));
  v->names[v->n] = xstrdup (name);
  v->values[v->n] = xstrdup (value);
  v->n++;
}

bool
vars_declared (const vars_t *v, const char *name)
{
  bool found = false;
  vars_get (v, name, &found);
  return found;
}

void
vars_free (vars_t *v)
{
  for (size_t i = 0; i < v->n; i++)
    {
      free (v->names[i]);
      free (v->values[i]);
    }
  free (v->names);
  free (v->values);
  json_decref (v->idx);
  memset (v, 0, sizeof *v);
}

/* Enter the user namespace if not done yet: before anything that makes or
 * reads a rootfs, and before network transfers (whose threads would make
 * a later unshare(CLONE_NEWUSER) impossible). */
int
need_userns (build_t *b, ib_error_t *err)
{
  if (ib_userns_mode () != IB_USERNS_AUTO)
    return 0;
  ib_userns_mode_t got;
  /* the TTY display's ticker thread would make unshare() fail: the
   * display goes for the moment (ending it joins the thread) */
  bool was = b->prog != NULL;
  prog_pause (b);
  int r = ib_userns_enter (b->opts->userns, &got, err);
  if (was)
    prog_resume (b);
  if (r < 0)
    return -1;
  ib_debug ("user namespace mode: %s", ib_userns_mode_name (got));
  const char *why = ib_userns_single_reason ();
  if (got == IB_USERNS_SINGLE && why)
    ib_warn ("single-id mode: %s, so the owners of files are not recorded: every file in the "
             "layers belongs to 0:0 (a RUN chown is lost). For owners as in the image: "
             "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $USER (or "
             "/etc/subuid and /etc/subgid; docs/security.md), or ask with --userns map",
             why);
  return 0;
}

/* The index of an image config's Env array: NAME -> the position of its
 * first "NAME=..." entry, so that a lookup (every $VAR of every word) and an
 * ENV pair cost O(1), not a scan of the array (an ENV of 1M pairs took
 * O(n^2): 22 s for 50,000).  One array at a time, held (json_incref) so
 * that its address is never another's.  Only config_env_set changes Env
 * arrays, by replacing an entry with one of the same name or appending, so
 * the index stays right and is extended by the entries appended since. */
static struct
{
  json_t *arr;
  json_t *idx;
  size_t n;
} env_memo;

static json_t *
env_index (json_t *env)
{
  size_t n = json_array_size (env);
  if (env_memo.arr != env || n < env_memo.n)
    {
      json_decref (env_memo.arr);
      json_decref (env_memo.idx);
      env_memo.arr = json_incref (env);
      env_memo.idx = json_object ();
      env_memo.n = 0;
    }
  for (size_t i = env_memo.n; i < n; i++)
    {
      const char *s = json_string_value (json_array_get (env, i));
      const char *eq = s ? strchr (s, '=') : NULL;
      if (eq == NULL)
        continue;
      cleanup_free char *name = xstrndup (s, (size_t) (eq - s));
      if (json_object_get (env_memo.idx, name) == NULL)
        json_object_set_new_nocheck (env_memo.idx, name, json_integer ((json_int_t) i));
    }
  env_memo.n = n;
  return env_memo.idx;
}

const char *
config_env_get (json_t *config, const char *name)
{
  json_t *env = json_object_get (json_object_get (config, "config"), "Env");
  if (!json_is_array (env))
    return NULL;
  json_t *at = json_object_get (env_index (env), name);
  if (at == NULL)
    return NULL;
  const char *s = json_string_value (json_array_get (env, (size_t) json_integer_value (at)));
  size_t n = strlen (name);
  if (s && strncmp (s, name, n) == 0 && s[n] == '=')
    return s + n + 1;
  return NULL;
}

const char *
lookup (void *p, const char *name)
{
  lookup_ctx_t *c = p;
  if (c->st)
    {
      const char *v = config_env_get (c->st->config, name);
      if (v)
        return v;
    }
  return c->args ? vars_get (c->args, name, NULL) : NULL;
}

char
escape_char (build_t *b)
{
  return b->recipe->escape ? b->recipe->escape : '\\';
}

/* Count the `len` bytes an expansion made against the instruction's and the
 * build's bounds (build.h: IB_EXPAND_INSTR_MAX, IB_EXPAND_BUILD_MAX): one
 * word is at most IB_EXPAND_MAX, but an instruction may hold many words
 * and a recipe many instructions. */
int
expand_count (build_t *b, size_t len, ib_error_t *err)
{
  if (b->budget_in != b->cur_in || b->cur_in == NULL)
    {
      b->budget_in = b->cur_in;
      b->instr_expanded = 0;
    }
  b->instr_expanded += len;
  b->build_expanded += len;
  if (b->cur_in && b->instr_expanded > IB_EXPAND_INSTR_MAX)
    return ib_error_set (err, EFBIG,
                         "the expanded words of this instruction add up to more than %zu bytes",
                         (size_t) IB_EXPAND_INSTR_MAX);
  if (b->build_expanded > IB_EXPAND_BUILD_MAX)
    return ib_error_set (err, EFBIG,
                         "the expanded words of the build add up to more than %zu bytes",
                         (size_t) IB_EXPAND_BUILD_MAX);
  return 0;
}

int
expand (build_t *b, stage_state_t *st, const char *word, char **out, ib_error_t *err)
{
  lookup_ctx_t c = { st, st ? &st->args : &b->global_args };
  if (ib_expand_word (word, escape_char (b), lookup, &c, out, err) < 0)
    return -1;
  if (expand_count (b, strlen (*out), err) < 0)
    {
      free (*out);
      *out = NULL;
      return -1;
    }
  return 0;
}

int
instr_error (build_t *b, const ib_instr_t *in, ib_error_t *err)
{
  return ib_error_prefix (err, "%s:%d: %s", b->recipe->path, in->line, in->keyword);
}

json_t *
config_section (json_t *config)
{
  json_t *c = json_object_get (config, "config");
  if (!json_is_object (c))
    {
      c = json_object ();
      json_object_set_new (config, "config", c);
    }
  return c;
}

const char *
config_string (json_t *config, const char *key)
{
  return json_string_value (json_object_get (config_section (config), key));
}

void
config_env_set (json_t *config, const char *name, const char *value)
{
  json_t *c = config_section (config);
  json_t *env = json_object_get (c, "Env");
  if (!json_is_array (env))
    {
      env = json_array ();
      json_object_set_new (c, "Env", env);
    }
  cleanup_free char *kv = xasprintf ("%s=%s", name, value);
  json_t *at = json_object_get (env_index (env), name);
  if (at)
    json_array_set_new (env, (size_t) json_integer_value (at), json_string (kv));
  else
    json_array_append_new (env, json_string (kv));
}

char *
created_now (build_t *b)
{
  time_t t = b->sde >= 0 ? (time_t) b->sde : time (NULL);
  struct tm tm;
  gmtime_r (&t, &tm);
  char buf[64];
  strftime (buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return xstrdup (buf);
}

void
add_history_at (build_t *b, stage_state_t *st, const char *created_by, bool empty_layer,
                const char *when)
{
  json_t *h = json_object_get (st->config, "history");
  if (!json_is_array (h))
    {
      h = json_array ();
      json_object_set_new (st->config, "history", h);
    }
  cleanup_free char *created = when ? xstrdup (when) : created_now (b);
  json_t *e = json_pack ("{s:s, s:s, s:s}", "created", created, "created_by", created_by,
                         "comment", "imgbuild");
  if (empty_layer)
    json_object_set_new (e, "empty_layer", json_true ());
  json_array_append_new (h, e);
}

void
add_history (build_t *b, stage_state_t *st, const char *created_by, bool empty_layer)
{
  add_history_at (b, st, created_by, empty_layer, NULL);
}
