/* rootfs/gpu.c — CDI specs and NVIDIA driver discovery (see gpu.h). */
#include "rootfs/gpu.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml.h>

/* --- edits ---------------------------------------------------------------- */

static const char *
keep (ib_gpu_edits_t *e, const char *s)
{
  size_t n = ib_strv_len (e->owned);
  e->owned = xrealloc (e->owned, sizeof (char *) * (n + 2));
  e->owned[n] = xstrdup (s);
  e->owned[n + 1] = NULL;
  return e->owned[n];
}

int
ib_gpu_resolve_all (char *const *devices, char *const *spec_dirs, char *const *env,
                    ib_gpu_edits_t *edits, ib_error_t *err)
{
  ib_gpu_opts_t go = { .spec_dirs = spec_dirs };
  for (char *const *e = env; e && *e; e++)
    if (ib_str_has_prefix (*e, "NVIDIA_VISIBLE_DEVICES="))
      go.visible_devices = strchr (*e, '=') + 1;
    else if (ib_str_has_prefix (*e, "NVIDIA_DRIVER_CAPABILITIES="))
      go.capabilities = strchr (*e, '=') + 1;
  for (char *const *d = devices; d && *d; d++)
    if (ib_gpu_resolve (*d, &go, edits, err) < 0)
      {
        ib_gpu_edits_free (edits);
        return -1;
      }
  return 0;
}

void
ib_gpu_edits_free (ib_gpu_edits_t *e)
{
  free (e->mounts);
  free (e->symlinks);
  ib_strv_free (e->env);
  ib_strv_free (e->ldconfig_dirs);
  ib_strv_free (e->owned);
  memset (e, 0, sizeof *e);
}

/* Every GPU bind is read-only: a step reads the host's driver files and
 * opens its device nodes (which a read-only mount still lets it read and
 * write: rootfs/sandbox_tree.c, bind_readonly), but in root mode a
 * writable bind would let its uid 0, the host's, change them.  A CDI
 * mount without "ro" is bound read-only all the same (docs/gpu.md). */
static void
add_bind (ib_gpu_edits_t *e, const char *host, const char *target)
{
  for (size_t i = 0; i < e->n_mounts; i++)
    if (strcmp (e->mounts[i].target, target) == 0)
      return; /* first one wins: a device in two requests */
  e->mounts = xrealloc (e->mounts, sizeof *e->mounts * (e->n_mounts + 1));
  e->mounts[e->n_mounts++] = (ib_mount_t){ .type = IB_MOUNT_BIND, .source = keep (e, host),
                                           .target = keep (e, target), .readonly = true };
}

static void
add_symlink (ib_gpu_edits_t *e, const char *path, const char *target)
{
  for (size_t i = 0; i < e->n_symlinks; i++)
    if (strcmp (e->symlinks[i].path, path) == 0)
      return;
  e->symlinks = xrealloc (e->symlinks, sizeof *e->symlinks * (e->n_symlinks + 1));
  e->symlinks[e->n_symlinks++]
      = (ib_sandbox_symlink_t){ .path = keep (e, path), .target = keep (e, target) };
}

static void
add_ldconfig_dir (ib_gpu_edits_t *e, const char *dir)
{
  e->ldconfig = true;
  for (char **d = e->ldconfig_dirs; d && *d; d++)
    if (strcmp (*d, dir) == 0)
      return;
  ib_strv_push (&e->ldconfig_dirs, dir);
}

static void
add_env (ib_gpu_edits_t *e, const char *kv)
{
  ib_strv_push (&e->env, kv);
}

/* --- YAML to JSON (libyaml events) ----------------------------------------- */

static json_t *yaml_node (yaml_parser_t *p, yaml_event_t *first, const char *file,
                          ib_error_t *err);

static int
yaml_next (yaml_parser_t *p, yaml_event_t *ev, const char *file, ib_error_t *err)
{
  if (!yaml_parser_parse (p, ev))
    return ib_error_set (err, EINVAL, "CDI spec %s: line %zu: %s", file,
                         p->problem_mark.line + 1, p->problem ? p->problem : "bad YAML");
  return 0;
}

static json_t *
yaml_scalar (const yaml_event_t *ev)
{
  const char *v = (const char *) ev->data.scalar.value;
  if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
    {
      /* decimal integers as written (no octal or hex reading: "010" stays
       * a string, as a device name must) */
      char *end;
      errno = 0;
      long long n = strtoll (v, &end, 10);
      char canon[24];
      snprintf (canon, sizeof canon, "%lld", n);
      if (*v && *end == '\0' && errno == 0 && strcmp (canon, v) == 0)
        return json_integer (n);
      if (strcmp (v, "true") == 0 || strcmp (v, "false") == 0)
        return json_boolean (v[0] == 't');
      if (strcmp (v, "null") == 0 || strcmp (v, "~") == 0 || *v == '\0')
        return json_null ();
    }
  return json_string (v);
}

static json_t *
yaml_node (yaml_parser_t *p, yaml_event_t *ev, const char *file, ib_error_t *err)
{
  if (ev->type == YAML_SCALAR_EVENT)
    return yaml_scalar (ev);
  if (ev->type == YAML_ALIAS_EVENT)
    {
      ib_error_set (err, EINVAL, "CDI spec %s: line %zu: YAML aliases are not supported", file,
                    ev->start_mark.line + 1);
      return NULL;
    }
  bool map = ev->type == YAML_MAPPING_START_EVENT;
  if (!map && ev->type != YAML_SEQUENCE_START_EVENT)
    {
      ib_error_set (err, EINVAL, "CDI spec %s: line %zu: unexpected YAML", file,
                    ev->start_mark.line + 1);
      return NULL;
    }
  json_t *out = map ? json_object () : json_array ();
  for (;;)
    {
      yaml_event_t k;
      if (yaml_next (p, &k, file, err) < 0)
        goto fail;
      if (k.type == YAML_MAPPING_END_EVENT || k.type == YAML_SEQUENCE_END_EVENT)
        {
          yaml_event_delete (&k);
          return out;
        }
      if (!map)
        {
          json_t *v = yaml_node (p, &k, file, err);
          yaml_event_delete (&k);
          if (v == NULL)
            goto fail;
          json_array_append_new (out, v);
          continue;
        }
      if (k.type != YAML_SCALAR_EVENT)
        {
          ib_error_set (err, EINVAL, "CDI spec %s: line %zu: a mapping key must be a scalar",
                        file, k.start_mark.line + 1);
          yaml_event_delete (&k);
          goto fail;
        }
      cleanup_free char *key = xstrdup ((const char *) k.data.scalar.value);
      yaml_event_delete (&k);
      yaml_event_t v;
      if (yaml_next (p, &v, file, err) < 0)
        goto fail;
      json_t *jv = yaml_node (p, &v, file, err);
      yaml_event_delete (&v);
      if (jv == NULL)
        goto fail;
      json_object_set_new (out, key, jv);
    }
fail:
  json_decref (out);
  return NULL;
}

static json_t *
load_yaml (const char *file, const char *data, size_t len, ib_error_t *err)
{
  yaml_parser_t p;
  yaml_parser_initialize (&p);
  yaml_parser_set_input_string (&p, (const unsigned char *) data, len);
  json_t *doc = NULL;
  for (;;)
    {
      yaml_event_t ev;
      if (yaml_next (&p, &ev, file, err) < 0)
        break;
      yaml_event_type_t t = ev.type;
      if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT
          || t == YAML_SCALAR_EVENT)
        {
          doc = yaml_node (&p, &ev, file, err);
          yaml_event_delete (&ev);
          break;
        }
      yaml_event_delete (&ev);
      if (t == YAML_STREAM_END_EVENT)
        {
          ib_error_set (err, EINVAL, "CDI spec %s: empty", file);
          break;
        }
    }
  yaml_parser_delete (&p);
  return doc;
}

static json_t *
load_spec (const char *file, ib_error_t *err)
{
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (ib_read_file (file, &data, &len, err) < 0)
    return NULL;
  json_t *doc;
  if (ib_str_has_suffix (file, ".json"))
    {
      json_error_t je;
      doc = json_loadb (data, len, 0, &je);
      if (doc == NULL)
        {
          ib_error_set (err, EINVAL, "CDI spec %s: line %d: %s", file, je.line, je.text);
          return NULL;
        }
    }
  else if ((doc = load_yaml (file, data, len, err)) == NULL)
    return NULL;
  const char *kind = json_string_value (json_object_get (doc, "kind"));
  const char *eq = kind ? strchr (kind, '/') : NULL;
  if (!json_is_object (doc) || kind == NULL || eq == NULL || eq == kind || eq[1] == '\0'
      || !json_is_array (json_object_get (doc, "devices")))
    {
      ib_error_set (err, EINVAL, "CDI spec %s: needs \"kind\": \"vendor.com/class\" and a "
                    "\"devices\" list", file);
      json_decref (doc);
      return NULL;
    }
  return doc;
}

/* --- CDI containerEdits ---------------------------------------------------- */

static void
apply_hook (ib_gpu_edits_t *e, json_t *hook, const char *file)
{
  const char *path = json_string_value (json_object_get (hook, "path"));
  const char *when = json_string_value (json_object_get (hook, "hookName"));
  json_t *args = json_object_get (hook, "args");
  size_t i, n = json_array_size (args);
  const char *sub = NULL;
  size_t at = 0;
  for (i = 1; i < n; i++)
    {
      const char *a = json_string_value (json_array_get (args, i));
      if (a && a[0] != '-' && strcmp (a, "hook") != 0)
        {
          sub = a;
          at = i;
          break;
        }
    }
  const char *prog = path ? strrchr (path, '/') : NULL;
  prog = prog ? prog + 1 : path;
  bool nvidia = prog && (strcmp (prog, "nvidia-cdi-hook") == 0 || strcmp (prog, "nvidia-ctk") == 0);
  if (nvidia && sub && strcmp (sub, "update-ldcache") == 0)
    {
      e->ldconfig = true;
      for (i = at + 1; i < n; i++)
        {
          const char *a = json_string_value (json_array_get (args, i));
          if (a && strcmp (a, "--folder") == 0 && i + 1 < n)
            add_ldconfig_dir (e, json_string_value (json_array_get (args, ++i)));
          else if (a && ib_str_has_prefix (a, "--folder="))
            add_ldconfig_dir (e, a + 9);
        }
      return;
    }
  if (nvidia && sub && strcmp (sub, "create-symlinks") == 0)
    {
      for (i = at + 1; i < n; i++)
        {
          const char *a = json_string_value (json_array_get (args, i));
          const char *spec = NULL;
          if (a && strcmp (a, "--link") == 0 && i + 1 < n)
            spec = json_string_value (json_array_get (args, ++i));
          else if (a && ib_str_has_prefix (a, "--link="))
            spec = a + 7;
          const char *sep = spec ? strstr (spec, "::") : NULL;
          if (sep && sep != spec && sep[2] == '/')
            {
              cleanup_free char *target = xstrndup (spec, (size_t) (sep - spec));
              add_symlink (e, sep + 2, target);
            }
        }
      return;
    }
  if (nvidia && sub
      && (strcmp (sub, "chmod") == 0 || strcmp (sub, "enable-cuda-compat") == 0
          || strcmp (sub, "disable-device-node-modification") == 0))
    {
      ib_debug ("CDI spec %s: hook %s %s skipped (not needed in imgbuild's sandbox)", file, prog,
                sub);
      return;
    }
  ib_warn ("CDI hook %s%s%s (%s) in %s is not run: imgbuild runs only the NVIDIA hooks it knows",
           path ? path : "(no path)", sub ? " " : "", sub ? sub : "", when ? when : "?", file);
}

static void
apply_edits (ib_gpu_edits_t *e, json_t *edits, const char *file)
{
  size_t i;
  json_t *x;
  json_array_foreach (json_object_get (edits, "env"), i, x)
    if (json_is_string (x) && strchr (json_string_value (x), '='))
      add_env (e, json_string_value (x));
  json_array_foreach (json_object_get (edits, "deviceNodes"), i, x)
  {
    const char *p = json_string_value (json_object_get (x, "path"));
    const char *h = json_string_value (json_object_get (x, "hostPath"));
    if (p && p[0] == '/')
      add_bind (e, h ? h : p, p);
  }
  json_array_foreach (json_object_get (edits, "mounts"), i, x)
  {
    const char *h = json_string_value (json_object_get (x, "hostPath"));
    const char *c = json_string_value (json_object_get (x, "containerPath"));
    if (h && c && c[0] == '/')
      add_bind (e, h, c);
  }
  json_array_foreach (json_object_get (edits, "hooks"), i, x)
    apply_hook (e, x, file);
}

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

/* A device's name: a string, or an integer where a YAML spec left a name
 * like 0 unquoted (the text it had, in `buf`).  NULL when neither. */
static const char *
device_name (json_t *dev, char buf[24])
{
  json_t *n = json_object_get (dev, "name");
  if (json_is_integer (n))
    {
      snprintf (buf, 24, "%" JSON_INTEGER_FORMAT, json_integer_value (n));
      return buf;
    }
  return json_string_value (n);
}

/* 1: found (edits applied), 0: no spec of that kind, -1: error. */
static int
cdi_resolve (const char *kind, const char *name, char *const *dirs, ib_gpu_edits_t *e,
             ib_error_t *err)
{
  json_t *best_spec = NULL, *best_dev = NULL;
  cleanup_free char *best_file = NULL;
  bool kind_seen = false;
  cleanup_strv char **names = NULL;
  int ret = -1;
  for (char *const *d = dirs; *d; d++)
    {
      DIR *dir = opendir (*d);
      if (dir == NULL)
        continue;
      cleanup_strv char **files = NULL;
      for (struct dirent *de; (de = readdir (dir)) != NULL;)
        if (ib_str_has_suffix (de->d_name, ".json") || ib_str_has_suffix (de->d_name, ".yaml")
            || ib_str_has_suffix (de->d_name, ".yml"))
          ib_strv_push (&files, de->d_name);
      closedir (dir);
      if (files)
        qsort (files, ib_strv_len (files), sizeof (char *), cmp_str);
      for (char **f = files; f && *f; f++)
        {
          cleanup_free char *path = ib_path_join (*d, *f);
          json_t *spec = load_spec (path, err);
          if (spec == NULL)
            goto out;
          if (strcmp (json_string_value (json_object_get (spec, "kind")), kind) != 0)
            {
              json_decref (spec);
              continue;
            }
          kind_seen = true;
          size_t i;
          json_t *dev;
          bool used = false;
          json_array_foreach (json_object_get (spec, "devices"), i, dev)
          {
            char nbuf[24];
            const char *dn = device_name (dev, nbuf);
            if (dn == NULL)
              continue;
            bool listed = false;
            for (char **x = names; x && *x; x++)
              listed |= strcmp (*x, dn) == 0;
            if (!listed)
              ib_strv_push (&names, dn);
            if (strcmp (dn, name) == 0)
              {
                /* later files and directories take priority */
                json_decref (best_spec);
                best_spec = json_incref (spec);
                best_dev = dev;
                free (best_file);
                best_file = xstrdup (path);
                used = true;
              }
          }
          (void) used;
          json_decref (spec);
        }
    }
  if (!kind_seen)
    {
      ret = 0;
      goto out;
    }
  if (best_dev == NULL)
    {
      ib_buf_t where = { 0 }, list = { 0 };
      for (char *const *d = dirs; *d; d++)
        ib_buf_printf (&where, "%s%s", d == dirs ? "" : ", ", *d);
      for (char **x = names; x && *x; x++)
        ib_buf_printf (&list, "%s%s", x == names ? "" : ", ", *x);
      ib_error_set (err, ENOENT, "CDI device %s=%s: not found in %s (devices: %s)", kind, name,
                    where.data, list.len ? list.data : "none");
      ib_buf_free (&where);
      ib_buf_free (&list);
      goto out;
    }
  apply_edits (e, json_object_get (best_spec, "containerEdits"), best_file);
  apply_edits (e, json_object_get (best_dev, "containerEdits"), best_file);
  ib_debug ("CDI device %s=%s from %s", kind, name, best_file);
  ret = 1;
out:
  json_decref (best_spec);
  return ret;
}

/* --- NVIDIA discovery ------------------------------------------------------ */

/* The driver's files by capability, as libnvidia-container lists them
 * (NVIDIA/libnvidia-container, src/nvc_info.c: utility_bins, compute_bins,
 * utility_libs, compute_libs, video_libs, graphics_libs, ngx_libs); names
 * here, not code. */
static const char *const utility_bins[]
    = { "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", NULL };
static const char *const compute_bins[]
    = { "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", NULL };
static const char *const utility_libs[]
    = { "libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so", NULL };
static const char *const compute_libs[]
    = { "libcuda.so",         "libcudadebugger.so",        "libnvidia-opencl.so",
        "libnvidia-gpucomp.so", "libnvidia-ptxjitcompiler.so", "libnvidia-fatbinaryloader.so",
        "libnvidia-allocator.so", "libnvidia-compiler.so",   "libnvidia-pkcs11.so",
        "libnvidia-pkcs11-openssl3.so", "libnvidia-nvvm.so", NULL };
static const char *const video_libs[]
    = { "libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so",
        "libnvcuvid.so", NULL };
static const char *const graphics_libs[]
    = { "libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so",
        "libnvidia-glsi.so",    "libnvidia-fbc.so",    "libnvidia-ifr.so",
        "libnvidia-rtcore.so",  "libnvoptix.so",       "libGLX_nvidia.so",
        "libEGL_nvidia.so",     "libGLESv2_nvidia.so", "libGLESv1_CM_nvidia.so",
        "libnvidia-glvkspirv.so", NULL };
static const char *const ngx_libs[] = { "libnvidia-ngx.so", NULL };

static bool
cap_on (const char *caps, const char *cap)
{
  if (strcmp (caps, "all") == 0)
    return true;
  size_t n = strlen (cap);
  for (const char *s = caps; *s;)
    {
      const char *c = strchrnul (s, ',');
      if ((size_t) (c - s) == n && strncmp (s, cap, n) == 0)
        return true;
      s = *c ? c + 1 : c;
    }
  return false;
}

struct gpu
{
  char *bus;   /* PCI bus id (directory name), for ordering */
  char *uuid;
  int minor;
};

static int
cmp_gpu (const void *a, const void *b)
{
  return strcmp (((const struct gpu *) a)->bus, ((const struct gpu *) b)->bus);
}

/* GPUs from /proc/driver/nvidia/gpus/BUS/information, in bus order (the
 * order nvidia-smi numbers them in); where that is missing, /dev/nvidiaN
 * in minor order. */
static struct gpu *
list_gpus (const char *root, size_t *n)
{
  struct gpu *v = NULL;
  *n = 0;
  cleanup_free char *pd = xasprintf ("%s/proc/driver/nvidia/gpus", root);
  DIR *d = opendir (pd);
  if (d)
    {
      for (struct dirent *de; (de = readdir (d)) != NULL;)
        {
          if (de->d_name[0] == '.')
            continue;
          cleanup_free char *info = xasprintf ("%s/%s/information", pd, de->d_name);
          cleanup_free char *data = NULL;
          if (ib_read_file (info, &data, NULL, NULL) < 0)
            {
              continue;
            }
          struct gpu g = { .minor = -1 };
          for (char *save = NULL, *l = strtok_r (data, "\n", &save); l;
               l = strtok_r (NULL, "\n", &save))
            {
              char *colon = strchr (l, ':');
              if (colon == NULL)
                continue;
              char *val = colon + 1;
              while (*val == ' ' || *val == '\t')
                val++;
              if (ib_str_has_prefix (l, "GPU UUID"))
                g.uuid = xstrdup (val);
              else if (ib_str_has_prefix (l, "Device Minor"))
                g.minor = atoi (val);
            }
          if (g.minor < 0)
            {
              free (g.uuid);
              continue;
            }
          g.bus = xstrdup (de->d_name);
          v = xrealloc (v, sizeof *v * (*n + 1));
          v[(*n)++] = g;
        }
      closedir (d);
    }
  if (*n == 0)
    {
      cleanup_free char *dev = xasprintf ("%s/dev", root);
      DIR *dd = opendir (dev);
      for (struct dirent *de; dd && (de = readdir (dd)) != NULL;)
        if (ib_str_has_prefix (de->d_name, "nvidia") && de->d_name[6]
            && strspn (de->d_name + 6, "0123456789") == strlen (de->d_name + 6))
          {
            v = xrealloc (v, sizeof *v * (*n + 1));
            int m = atoi (de->d_name + 6);
            v[(*n)++] = (struct gpu){ .bus = xasprintf ("%08d", m), .minor = m };
          }
      if (dd)
        closedir (dd);
    }
  qsort (v, *n, sizeof *v, cmp_gpu);
  return v;
}

/* `ldconfig -p` of the host: "\tNAME (libc6,x86-64) => PATH" lines. */
static char **
host_ldcache (ib_error_t *err)
{
  const char *cmd = getenv ("IMGBUILD_LDCONFIG");
  static const char *const cands[] = { "/sbin/ldconfig", "/usr/sbin/ldconfig", NULL };
  if (cmd == NULL || *cmd == '\0')
    {
      cmd = NULL;
      for (int i = 0; cands[i] && cmd == NULL; i++)
        if (access (cands[i], X_OK) == 0)
          cmd = cands[i];
      if (cmd == NULL)
        {
          ib_error_set (err, ENOENT, "NVIDIA discovery: no ldconfig on the host to read the "
                        "library cache with");
          return NULL;
        }
    }
  int p[2];
  if (pipe2 (p, O_CLOEXEC) < 0)
    {
      ib_error_sys (err, errno, "pipe");
      return NULL;
    }
  pid_t pid = fork ();
  if (pid == 0)
    {
      dup2 (p[1], 1);
      int null = open ("/dev/null", O_WRONLY);
      if (null >= 0)
        dup2 (null, 2);
      execl (cmd, cmd, "-p", (char *) NULL);
      _exit (127);
    }
  close (p[1]);
  ib_buf_t out = { 0 };
  char buf[65536];
  ssize_t k;
  while ((k = read (p[0], buf, sizeof buf)) > 0 || (k < 0 && errno == EINTR))
    if (k > 0)
      ib_buf_append (&out, buf, (size_t) k);
  close (p[0]);
  int status = 0;
  if (pid > 0)
    while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
      ;
  if (pid < 0 || !WIFEXITED (status) || WEXITSTATUS (status) != 0)
    {
      ib_buf_free (&out);
      ib_error_set (err, EIO, "NVIDIA discovery: %s -p failed", cmd);
      return NULL;
    }
  char **lines = NULL;
  if (out.data)
    for (char *save = NULL, *l = strtok_r (out.data, "\n", &save); l;
         l = strtok_r (NULL, "\n", &save))
      if (strstr (l, " => ") && (strstr (l, "x86-64") || strstr (l, "AArch64")
                                 || strstr (l, "64bit")))
        ib_strv_push (&lines, l);
  ib_buf_free (&out);
  if (lines == NULL)
    lines = xmalloc (sizeof (char *));
  return lines;
}

static void
add_library (ib_gpu_edits_t *e, const char *root, const char *name, const char *path)
{
  cleanup_free char *host = xasprintf ("%s%s", root, path);
  char real[PATH_MAX];
  if (realpath (host, real) == NULL)
    return;
  size_t rl = strlen (root);
  if (rl && (strncmp (real, root, rl) != 0 || real[rl] != '/'))
    return;
  const char *cpath = real + rl; /* the real file's path in the container */
  add_bind (e, real, cpath);
  cleanup_free char *dir = xstrdup (cpath);
  *strrchr (dir, '/') = '\0';
  add_ldconfig_dir (e, *dir ? dir : "/");
  /* the soname link (libcuda.so.1 -> libcuda.so.535.104.05): relative
   * when both are in one directory, else the real file's full path (a
   * merged-/usr host lists /lib/x86_64-linux-gnu/libcuda.so.1 for
   * /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05; an image without
   * merged /usr has no such file in /lib/x86_64-linux-gnu) */
  if (strcmp (path, cpath) != 0)
    {
      const char *base = strrchr (cpath, '/') + 1;
      const char *lbase = strrchr (path, '/');
      bool same_dir = lbase && (size_t) (lbase - path) == (size_t) (base - 1 - cpath)
                      && strncmp (path, cpath, (size_t) (lbase - path)) == 0;
      add_symlink (e, path, same_dir ? base : cpath);
    }
  (void) name;
}

static void
add_libraries (ib_gpu_edits_t *e, const char *root, char **ldcache, const char *const *stems)
{
  cleanup_strv char **seen = NULL; /* sonames taken: the cache's first entry wins, as for ld.so */
  for (const char *const *s = stems; *s; s++)
    {
      size_t sl = strlen (*s);
      for (char **l = ldcache; *l; l++)
        {
          const char *name = *l;
          while (*name == ' ' || *name == '\t')
            name++;
          /* versioned names only: NAME.so.N (the unversioned dev link is
           * for linking, not for running) */
          if (strncmp (name, *s, sl) != 0 || name[sl] != '.')
            continue;
          const char *arrow = strstr (name, " => ");
          cleanup_free char *nm = xstrndup (name, strcspn (name, " "));
          bool dup = false;
          for (char **x = seen; x && *x && !dup; x++)
            dup = strcmp (*x, nm) == 0;
          if (dup)
            continue;
          ib_strv_push (&seen, nm);
          add_library (e, root, nm, arrow + 4);
        }
    }
}

static const char *
find_binary (const char *root, const char *name, char *out, size_t outlen)
{
  static const char *const dirs[] = { "/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin",
                                      "/usr/local/nvidia/bin", NULL };
  /* The driver's own ELF binary: distributions and GPU clouds put wrapper
   * scripts on the PATH (/usr/bin/nvidia-smi exec'ing
   * /usr/local/nvidia/bin/nvidia-smi) that would not work bound alone.  A
   * script is taken only when no ELF binary exists. */
  char script[PATH_MAX] = "";
  for (int i = 0; dirs[i]; i++)
    {
      snprintf (out, outlen, "%s%s/%s", root, dirs[i], name);
      if (access (out, X_OK) != 0)
        continue;
      char magic[4] = { 0 };
      int fd = open (out, O_RDONLY | O_CLOEXEC);
      bool elf = fd >= 0 && read (fd, magic, 4) == 4 && memcmp (magic, "\177ELF", 4) == 0;
      if (fd >= 0)
        close (fd);
      if (elf)
        return out;
      if (script[0] == '\0')
        snprintf (script, sizeof script, "%s", out);
    }
  if (script[0])
    {
      snprintf (out, outlen, "%s", script);
      return out;
    }
  return NULL;
}

static int
nvidia_discover (const char *sel, const ib_gpu_opts_t *o, ib_gpu_edits_t *e, const char *dirs_shown,
                 ib_error_t *err)
{
  /* The root by its real path: libraries are matched by their real paths
   * under it (add_library), which a root given through a symlink would
   * never prefix. */
  const char *root = getenv ("IMGBUILD_NVIDIA_ROOT");
  cleanup_free char *root_real = root && *root ? realpath (root, NULL) : NULL;
  if (root_real)
    root = strcmp (root_real, "/") == 0 ? "" : root_real;
  else if (root == NULL)
    root = "";
  const char *vis = sel;
  if (strcmp (sel, "all") == 0 && o->visible_devices && *o->visible_devices)
    vis = o->visible_devices;
  if (strcmp (vis, "void") == 0)
    return 0;
  cleanup_free char *ctl = xasprintf ("%s/dev/nvidiactl", root);
  struct stat st;
  if (stat (ctl, &st) < 0)
    return ib_error_set (err, ENODEV,
                         "--device nvidia.com/gpu=%s: no CDI spec in %s and no NVIDIA driver "
                         "found (%s missing)",
                         sel, dirs_shown, ctl);
  const char *caps = o->capabilities && *o->capabilities ? o->capabilities : "compute,utility";

  size_t n = 0;
  struct gpu *gpus = list_gpus (root, &n);
  int ret = -1;
  char **cache = NULL;
  char *caps_dir = NULL;
  bool *want = xmalloc (sizeof (bool) * (n + 1));
  if (strcmp (vis, "all") == 0)
    for (size_t i = 0; i < n; i++)
      want[i] = true;
  else if (strcmp (vis, "none") != 0)
    {
      cleanup_free char *copy = xstrdup (vis);
      for (char *save = NULL, *t = strtok_r (copy, ",", &save); t; t = strtok_r (NULL, ",", &save))
        {
          bool found = false;
          for (size_t i = 0; i < n; i++)
            {
              char idx[24];
              snprintf (idx, sizeof idx, "%zu", i);
              if (strcmp (t, idx) == 0 || (gpus[i].uuid && strcmp (t, gpus[i].uuid) == 0))
                want[i] = found = true;
            }
          if (!found)
            {
              ib_error_set (err, ENODEV, "--device nvidia.com/gpu=%s: no GPU '%s' (%zu GPU%s "
                            "found)", sel, t, n, n == 1 ? "" : "s");
              goto out;
            }
        }
    }
  /* device nodes */
  static const char *const ctl_nodes[]
      = { "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", NULL };
  for (int i = 0; ctl_nodes[i]; i++)
    {
      cleanup_free char *h = xasprintf ("%s%s", root, ctl_nodes[i]);
      if (stat (h, &st) == 0)
        add_bind (e, h, ctl_nodes[i]);
    }
  for (size_t i = 0; i < n; i++)
    if (want[i])
      {
        cleanup_free char *c = xasprintf ("/dev/nvidia%d", gpus[i].minor);
        cleanup_free char *h = xasprintf ("%s%s", root, c);
        if (stat (h, &st) == 0)
          add_bind (e, h, c);
      }
  caps_dir = xasprintf ("%s/dev/nvidia-caps", root);
  DIR *cd = opendir (caps_dir);
  for (struct dirent *de; cd && (de = readdir (cd)) != NULL;)
    if (de->d_name[0] != '.')
      {
        cleanup_free char *c = xasprintf ("/dev/nvidia-caps/%s", de->d_name);
        cleanup_free char *h = xasprintf ("%s%s", root, c);
        add_bind (e, h, c);
      }
  if (cd)
    closedir (cd);
  /* libraries and binaries */
  cache = host_ldcache (err);
  if (cache == NULL)
    goto out;
  if (cap_on (caps, "utility"))
    add_libraries (e, root, cache, utility_libs);
  if (cap_on (caps, "compute"))
    add_libraries (e, root, cache, compute_libs);
  if (cap_on (caps, "video"))
    add_libraries (e, root, cache, video_libs);
  if (cap_on (caps, "graphics") || cap_on (caps, "display"))
    add_libraries (e, root, cache, graphics_libs);
  if (cap_on (caps, "ngx"))
    add_libraries (e, root, cache, ngx_libs);
  const char *const *bin_sets[] = { cap_on (caps, "utility") ? utility_bins : NULL,
                                    cap_on (caps, "compute") ? compute_bins : NULL };
  for (int s = 0; s < 2; s++)
    for (const char *const *b = bin_sets[s]; b && *b; b++)
      {
        char path[PATH_MAX];
        if (find_binary (root, *b, path, sizeof path))
          {
            cleanup_free char *c = xasprintf ("/usr/bin/%s", *b);
            add_bind (e, path, c);
          }
      }
  {
    cleanup_free char *kv = xasprintf ("NVIDIA_VISIBLE_DEVICES=%s", vis);
    add_env (e, kv);
  }
  ib_debug ("NVIDIA discovery: %zu GPU(s), %zu mounts, capabilities %s", n, e->n_mounts, caps);
  ret = 0;
out:
  for (size_t i = 0; i < n; i++)
    {
      free (gpus[i].bus);
      free (gpus[i].uuid);
    }
  free (gpus);
  free (want);
  ib_strv_free (cache);
  free (caps_dir);
  return ret;
}

/* ib_gpu_restrict's list: GPU indexes, NULL when unrestricted */
static char **allowed_gpus;

void
ib_gpu_restrict (const char *indexes)
{
  ib_strv_free (allowed_gpus);
  allowed_gpus = NULL;
  if (indexes == NULL)
    return;
  ib_strv_push (&allowed_gpus, ""); /* a list, even when empty */
  free (allowed_gpus[0]);
  allowed_gpus[0] = NULL;
  cleanup_free char *copy = xstrdup (indexes);
  char *save = NULL;
  for (char *t = strtok_r (copy, ",", &save); t; t = strtok_r (NULL, ",", &save))
    ib_strv_push (&allowed_gpus, t);
}

static int resolve_one (const char *request, const ib_gpu_opts_t *o, ib_gpu_edits_t *e,
                        ib_error_t *err);

int
ib_gpu_resolve (const char *request, const ib_gpu_opts_t *o, ib_gpu_edits_t *e, ib_error_t *err)
{
  const char *gpu = "nvidia.com/gpu=";
  if (allowed_gpus == NULL || request == NULL || !ib_str_has_prefix (request, gpu))
    return resolve_one (request, o, e, err);
  /* the GPUs the scheduler gave: "all" is those, index K the K-th of them
   * (a list "0,1" too, as discovery takes it) */
  size_t n = ib_strv_len (allowed_gpus);
  cleanup_strv char **picked = NULL;
  if (strcmp (request + strlen (gpu), "all") == 0)
    picked = ib_strv_dup (allowed_gpus);
  else
    {
      cleanup_free char *names = xstrdup (request + strlen (gpu));
      char *save = NULL;
      for (char *t = strtok_r (names, ",", &save); t; t = strtok_r (NULL, ",", &save))
        {
          char *end;
          unsigned long k = strtoul (t, &end, 10);
          if (*end != '\0' || *t == '-' || *t == '+')
            return ib_error_set (err, EPERM, "--device %s: only GPUs by index or all, as the "
                                 "job's GPUs are numbered, while the scheduler restricts them",
                                 request);
          if (k >= n)
            return ib_error_set (err, ENODEV, "--device %s: the job was given %zu GPU%s", request,
                                 n, n == 1 ? "" : "s");
          ib_strv_push (&picked, allowed_gpus[k]);
        }
    }
  if (picked == NULL || *picked == NULL)
    return ib_error_set (err, ENODEV, "--device %s: the job was given no GPU", request);
  /* one request for them all (discovery takes a list); where a CDI spec
   * names GPUs one by one, one request each */
  ib_buf_t list = { 0 };
  for (char **p = picked; *p; p++)
    ib_buf_printf (&list, "%s%s", p == picked ? "" : ",", *p);
  cleanup_free char *one = xasprintf ("%s%s", gpu, list.data);
  ib_buf_free (&list);
  if (picked[1] == NULL)
    return resolve_one (one, o, e, err);
  ib_error_t e1 = NULL;
  if (resolve_one (one, o, e, &e1) == 0)
    return 0;
  ib_error_free (&e1);
  for (char **p = picked; *p; p++)
    {
      cleanup_free char *each = xasprintf ("%s%s", gpu, *p);
      if (resolve_one (each, o, e, err) < 0)
        return -1;
    }
  return 0;
}

static int
resolve_one (const char *request, const ib_gpu_opts_t *o, ib_gpu_edits_t *e, ib_error_t *err)
{
  static const ib_gpu_opts_t none = { 0 };
  if (o == NULL)
    o = &none;
  const char *eq = request ? strchr (request, '=') : NULL;
  const char *slash = request ? strchr (request, '/') : NULL;
  if (request == NULL || eq == NULL || slash == NULL || slash > eq || slash == request
      || slash + 1 == eq || eq[1] == '\0')
    return ib_error_set (err, EINVAL,
                         "--device %s: expected a CDI device name vendor.com/class=NAME (e.g. "
                         "nvidia.com/gpu=all)",
                         request ? request : "");
  cleanup_free char *kind = xstrndup (request, (size_t) (eq - request));
  const char *name = eq + 1;
  static char *const default_dirs[] = { (char *) "/etc/cdi", (char *) "/var/run/cdi", NULL };
  char *const *dirs = o->spec_dirs ? o->spec_dirs : default_dirs;
  int r = cdi_resolve (kind, name, dirs, e, err);
  if (r != 0)
    return r < 0 ? -1 : 0;
  ib_buf_t where = { 0 };
  for (char *const *d = dirs; *d; d++)
    ib_buf_printf (&where, "%s%s", d == dirs ? "" : ", ", *d);
  if (strcmp (kind, "nvidia.com/gpu") != 0)
    {
      ib_error_set (err, ENOENT, "--device %s: no CDI spec of kind %s in %s", request, kind,
                    where.len ? where.data : "(no directories)");
      ib_buf_free (&where);
      return -1;
    }
  r = nvidia_discover (name, o, e, where.len ? where.data : "(no directories)", err);
  ib_buf_free (&where);
  return r;
}
