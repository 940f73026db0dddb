/* builder/cli/cells.c — a --matrix cell's summary and its file (cells.h). */
#include "builder/cli/cells.h"
#include "common/util.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void
cell_clear (matrix_cell_t *c)
{
  free (c->label);
  free (c->state);
  free (c->why);
  free (c->node);
  ib_strv_free (c->lines);
  memset (c, 0, sizeof *c);
}

char *
cell_status_line (const matrix_cell_t *c)
{
  ib_buf_t b = { 0 };
  ib_buf_printf (&b, "matrix %zu/%zu: %s: %s", c->index + 1, c->n, c->label,
                 c->state ? c->state : "unknown");
  bool not_built = c->state && strcmp (c->state, "not built") == 0;
  if (not_built)
    {
      ib_buf_printf (&b, " (%s)", c->why ? c->why : "unknown");
      return ib_buf_steal (&b);
    }
  if (c->seconds >= 0)
    ib_buf_printf (&b, " in %.1f s", c->seconds);
  if (c->node)
    ib_buf_printf (&b, " on %s", c->node);
  if (c->attempt > 1)
    ib_buf_printf (&b, " (attempt %d)", c->attempt);
  if (c->why)
    ib_buf_printf (&b, ": %s", c->why);
  return ib_buf_steal (&b);
}

void
cells_print_summary (FILE *f, const matrix_cell_t *cells, size_t n)
{
  size_t built = 0, failed = 0;
  for (size_t i = 0; i < n; i++)
    {
      built += cells[i].state && strcmp (cells[i].state, "ok") == 0;
      failed += cells[i].state && strcmp (cells[i].state, "FAILED") == 0;
    }
  fprintf (f, "matrix summary: %zu of %zu combinations built, %zu failed\n", built, n, failed);
  for (size_t i = 0; i < n; i++)
    {
      cleanup_free char *line = cell_status_line (&cells[i]);
      fprintf (f, "%s\n", line);
      for (char **l = cells[i].lines; l && *l; l++)
        fprintf (f, "%s\n", *l);
    }
  fflush (f);
}

int
cell_write (const char *path, const matrix_cell_t *c, ib_error_t *err)
{
  json_t *lines = json_array ();
  for (char **l = c->lines; l && *l; l++)
    json_array_append_new (lines, json_string (*l));
  json_t *j = json_pack ("{s:I, s:I, s:s, s:s, s:f, s:i, s:o}", "index", (json_int_t) c->index,
                         "n", (json_int_t) c->n, "label", c->label, "state", c->state,
                         "seconds", c->seconds, "attempt", c->attempt, "lines", lines);
  if (c->why)
    json_object_set_new (j, "why", json_string (c->why));
  if (c->node)
    json_object_set_new (j, "node", json_string (c->node));
  cleanup_free char *text = json_dumps (j, JSON_INDENT (1) | JSON_SORT_KEYS);
  json_decref (j);
  return ib_write_file_atomic (path, text, strlen (text), 0644, err);
}

int
cell_read (const char *path, matrix_cell_t *c, ib_error_t *err)
{
  memset (c, 0, sizeof *c);
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (ib_read_file (path, &data, &len, err) < 0)
    return -1;
  json_t *j = json_loadb (data, len, 0, NULL);
  json_t *index = json_object_get (j, "index"), *n = json_object_get (j, "n");
  json_t *lines = json_object_get (j, "lines"), *seconds = json_object_get (j, "seconds");
  const char *label = json_string_value (json_object_get (j, "label"));
  const char *state = json_string_value (json_object_get (j, "state"));
  const char *why = json_string_value (json_object_get (j, "why"));
  const char *node = json_string_value (json_object_get (j, "node"));
  if (!json_is_integer (index) || !json_is_integer (n) || !json_is_array (lines)
      || !json_is_number (seconds) || label == NULL || state == NULL
      || json_integer_value (index) < 0 || json_integer_value (n) <= json_integer_value (index))
    {
      json_decref (j);
      return ib_error_set (err, EINVAL, "%s: not a matrix cell record", path);
    }
  c->index = (size_t) json_integer_value (index);
  c->n = (size_t) json_integer_value (n);
  c->label = xstrdup (label);
  c->state = xstrdup (state);
  c->why = why ? xstrdup (why) : NULL;
  c->node = node ? xstrdup (node) : NULL;
  c->seconds = json_number_value (seconds);
  c->attempt = (int) json_integer_value (json_object_get (j, "attempt"));
  size_t i;
  json_t *l;
  json_array_foreach (lines, i, l)
    if (json_is_string (l))
      ib_strv_push (&c->lines, json_string_value (l));
  json_decref (j);
  return 0;
}
