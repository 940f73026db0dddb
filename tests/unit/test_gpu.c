/* tests/unit/test_gpu.c — rootfs/gpu.c: CDI specs (JSON and YAML, spec
 * directory priority, hooks, errors) and NVIDIA discovery against the fake
 * driver tree of tests/fixtures/gpu/make_fake_driver.sh (no GPU needed).
 * Runs from the source tree's root (make unit). */
#include "common/util.h"
#include "rootfs/gpu.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static char tmp[PATH_MAX]; /* canonical: the discovery tests compare paths */
static char *fake;         /* TMP/fake: the fake driver tree */

/* --- helpers --------------------------------------------------------------- */

static void
write_file (const char *dir, const char *name, const char *text)
{
  ib_error_t err = NULL;
  assert_int_equal (ib_mkdir_p (dir, 0755, &err), 0);
  cleanup_free char *p = ib_path_join (dir, name);
  assert_int_equal (ib_write_file_atomic (p, text, strlen (text), 0644, &err), 0);
}

static char *
dir_named (const char *name)
{
  char *d = ib_path_join (tmp, name);
  ib_error_t err = NULL;
  assert_int_equal (ib_rm_rf (d, &err), 0);
  assert_int_equal (ib_mkdir_p (d, 0755, &err), 0);
  return d;
}

/* `s` with every occurrence of `from` replaced by `to`. */
static void
replace_into (ib_buf_t *b, const char *s, const char *from, const char *to)
{
  size_t fl = strlen (from);
  for (const char *p; fl && (p = strstr (s, from)) != NULL; s = p + fl)
    {
      ib_buf_append (b, s, (size_t) (p - s));
      ib_buf_printf (b, "%s", to);
    }
  ib_buf_printf (b, "%s", s);
}

/* The edits as text, one item a line, with the fake tree's path shown as
 * $ROOT: "bind SRC -> TARGET ro|rw", "link PATH -> TARGET", "env K=V",
 * "ldconfig DIR..." (or nothing when ldconfig is off). */
static char *
show (const ib_gpu_edits_t *e)
{
  ib_buf_t b = { 0 };
  ib_buf_printf (&b, "%s", "");
  const char *root = fake ? fake : "\x01";
  for (size_t i = 0; i < e->n_mounts; i++)
    {
      assert_int_equal (e->mounts[i].type, IB_MOUNT_BIND);
      ib_buf_printf (&b, "bind ");
      replace_into (&b, e->mounts[i].source, root, "$ROOT");
      ib_buf_printf (&b, " -> %s %s\n", e->mounts[i].target, e->mounts[i].readonly ? "ro" : "rw");
    }
  for (size_t i = 0; i < e->n_symlinks; i++)
    {
      ib_buf_printf (&b, "link %s -> ", e->symlinks[i].path);
      replace_into (&b, e->symlinks[i].target, root, "$ROOT");
      ib_buf_printf (&b, "\n");
    }
  for (char **kv = e->env; kv && *kv; kv++)
    ib_buf_printf (&b, "env %s\n", *kv);
  if (e->ldconfig)
    {
      ib_buf_printf (&b, "ldconfig");
      for (char **d = e->ldconfig_dirs; d && *d; d++)
        ib_buf_printf (&b, " %s", *d);
      ib_buf_printf (&b, "\n");
    }
  return b.data;
}

/* Resolve `request` with `dirs` (NULL-terminated) and the given
 * NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES; assert success and
 * that the edits read `expected` (see show). */
static void
expect_edits (const char *request, char *const *dirs, const char *visible, const char *caps,
              const char *expected)
{
  ib_gpu_opts_t o = { .spec_dirs = dirs, .visible_devices = visible, .capabilities = caps };
  ib_gpu_edits_t e = { 0 };
  ib_error_t err = NULL;
  int r = ib_gpu_resolve (request, &o, &e, &err);
  if (r != 0)
    fail_msg ("%s: %s", request, err ? err->msg : "(no message)");
  cleanup_free char *got = show (&e);
  assert_string_equal (got, expected);
  ib_gpu_edits_free (&e);
  assert_int_equal (e.n_mounts, 0);
  assert_null (e.mounts);
}

static void
expect_error (const char *request, char *const *dirs, const char *message)
{
  ib_gpu_opts_t o = { .spec_dirs = dirs };
  ib_gpu_edits_t e = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_gpu_resolve (request, &o, &e, &err), -1);
  assert_non_null (err);
  assert_string_equal (err->msg, message);
  ib_error_free (&err);
  ib_gpu_edits_free (&e);
}

/* Warnings and debug lines, captured through the log sink. */
static ib_buf_t logged;

static void
capture (const char *level, const char *line, void *ud)
{
  (void) ud;
  ib_buf_printf (&logged, "%s: %s\n", level, line);
}

static void
log_start (void)
{
  ib_buf_free (&logged);
  memset (&logged, 0, sizeof logged);
  ib_buf_printf (&logged, "%s", "");
  ib_log_set_sink (capture, NULL);
}

static void
log_stop (void)
{
  ib_log_set_sink (NULL, NULL);
}

/* --- CDI ------------------------------------------------------------------- */

static const char json_spec[]
    = "{\"cdiVersion\": \"0.6.0\", \"kind\": \"example.com/gpu\",\n"
      " \"containerEdits\": {\"env\": [\"TOP=1\"],\n"
      "   \"deviceNodes\": [{\"path\": \"/dev/ctl\"}],\n"
      "   \"mounts\": [{\"hostPath\": \"/host/lib\", \"containerPath\": \"/usr/lib/x\","
      "                 \"options\": [\"nosuid\", \"ro\", \"bind\"]}]},\n"
      " \"devices\": [\n"
      "  {\"name\": \"0\", \"containerEdits\": {\"env\": [\"DEV=0\"],\n"
      "    \"deviceNodes\": [{\"path\": \"/dev/card0\", \"hostPath\": \"/host/dev/card0\","
      "                       \"type\": \"c\", \"major\": 226, \"minor\": 0,"
      "                       \"fileMode\": 438, \"permissions\": \"rw\", \"uid\": 0, \"gid\": 0}],\n"
      "    \"mounts\": [{\"hostPath\": \"/host/data\", \"containerPath\": \"/data\","
      "                  \"type\": \"bind\", \"options\": [\"rbind\", \"nosuid\"]}]}},\n"
      "  {\"name\": \"GPU-abc\", \"containerEdits\": {\"env\": [\"DEV=abc\"]}}]}\n";

/* The same spec in YAML, in the styles nvidia-ctk and people write:
 * block and flow collections, quoted and plain scalars, comments. */
static const char yaml_spec[] = "---\n"
                                "# a comment\n"
                                "cdiVersion: 0.6.0\n"
                                "kind: example.com/gpu\n"
                                "containerEdits:\n"
                                "  env: [TOP=1]\n"
                                "  deviceNodes:\n"
                                "  - path: /dev/ctl\n"
                                "  mounts:\n"
                                "  - hostPath: /host/lib\n"
                                "    containerPath: /usr/lib/x\n"
                                "    options: [nosuid, ro, bind]\n"
                                "devices:\n"
                                "- name: \"0\"\n"
                                "  containerEdits:\n"
                                "    env:\n"
                                "    - DEV=0\n"
                                "    deviceNodes:\n"
                                "    - {path: /dev/card0, hostPath: /host/dev/card0, type: c,\n"
                                "       major: 226, minor: 0, fileMode: 438, permissions: rw}\n"
                                "    mounts:\n"
                                "    - hostPath: '/host/data'\n"
                                "      containerPath: /data\n"
                                "      type: bind\n"
                                "      options:\n"
                                "      - rbind\n"
                                "      - nosuid\n"
                                "- name: GPU-abc\n"
                                "  containerEdits: {env: [DEV=abc]}\n";

/* Top-level edits first, then the device's. */
static const char dev0_edits[] = "bind /dev/ctl -> /dev/ctl ro\n"
                                 "bind /host/lib -> /usr/lib/x ro\n"
                                 "bind /host/dev/card0 -> /dev/card0 ro\n"
                                 "bind /host/data -> /data ro\n"
                                 "env TOP=1\n"
                                 "env DEV=0\n";

static void
test_cdi_json_and_yaml (void **state)
{
  (void) state;
  static const char *const names[] = { "spec.json", "spec.yaml", "spec.yml" };
  for (int i = 0; i < 3; i++)
    {
      cleanup_free char *d = dir_named ("cdi-fmt");
      write_file (d, names[i], i == 0 ? json_spec : yaml_spec);
      char *dirs[] = { d, NULL };
      expect_edits ("example.com/gpu=0", dirs, NULL, NULL, dev0_edits);
      expect_edits ("example.com/gpu=GPU-abc", dirs, NULL, NULL,
                    "bind /dev/ctl -> /dev/ctl ro\n"
                    "bind /host/lib -> /usr/lib/x ro\n"
                    "env TOP=1\n"
                    "env DEV=abc\n");
    }
}

static void
test_cdi_ignores_other_files_and_kinds (void **state)
{
  (void) state;
  cleanup_free char *d = dir_named ("cdi-mixed");
  write_file (d, "a.json", json_spec);
  write_file (d, "README", "not a spec {");
  write_file (d, "spec.json.bak", "not a spec {");
  write_file (d, "other.yaml", "cdiVersion: 0.6.0\nkind: other.org/fpga\n"
                               "devices:\n- name: \"0\"\n  containerEdits: {env: [FPGA=1]}\n");
  char *dirs[] = { d, NULL };
  expect_edits ("example.com/gpu=0", dirs, NULL, NULL, dev0_edits);
  expect_edits ("other.org/fpga=0", dirs, NULL, NULL, "env FPGA=1\n");
}

/* Unquoted device names that look like numbers (`- name: 0`, as people
 * write specs by hand) are names all the same; "010" stays "010". */
static void
test_cdi_yaml_plain_number_names (void **state)
{
  (void) state;
  cleanup_free char *d = dir_named ("cdi-plain");
  write_file (d, "spec.yaml", "cdiVersion: 0.6.0\nkind: example.com/gpu\ndevices:\n"
                              "- name: 0\n  containerEdits: {env: [N=0]}\n"
                              "- name: 010\n  containerEdits: {env: [N=010]}\n"
                              "- name: 1\n  containerEdits: {env: [N=1]}\n");
  char *dirs[] = { d, NULL };
  expect_edits ("example.com/gpu=0", dirs, NULL, NULL, "env N=0\n");
  expect_edits ("example.com/gpu=010", dirs, NULL, NULL, "env N=010\n");
  expect_edits ("example.com/gpu=1", dirs, NULL, NULL, "env N=1\n");
  cleanup_free char *msg
      = xasprintf ("CDI device example.com/gpu=8: not found in %s (devices: 0, 010, 1)", d);
  expect_error ("example.com/gpu=8", dirs, msg);
}

static const char prio_spec[] = "cdiVersion: 0.6.0\n"
                                "kind: example.com/gpu\n"
                                "devices:\n"
                                "- name: \"0\"\n"
                                "  containerEdits:\n"
                                "    env: [FROM=%s]\n"
                                "    deviceNodes: [{path: /dev/card0, hostPath: %s}]\n"
                                "- name: %s\n"
                                "  containerEdits: {env: [ONLY=%s]}\n";

static void
test_cdi_later_dirs_win (void **state)
{
  (void) state;
  cleanup_free char *etc = dir_named ("cdi-etc");
  cleanup_free char *run = dir_named ("cdi-run");
  cleanup_free char *a = xasprintf (prio_spec, "etc", "/etc-card0", "only-etc", "etc");
  cleanup_free char *b = xasprintf (prio_spec, "run", "/run-card0", "only-run", "run");
  write_file (etc, "nvidia.yaml", a);
  write_file (run, "nvidia.yaml", b);
  char *dirs[] = { etc, run, NULL };
  expect_edits ("example.com/gpu=0", dirs, NULL, NULL,
                "bind /run-card0 -> /dev/card0 ro\nenv FROM=run\n");
  char *rev[] = { run, etc, NULL };
  expect_edits ("example.com/gpu=0", rev, NULL, NULL,
                "bind /etc-card0 -> /dev/card0 ro\nenv FROM=etc\n");
  /* devices only one directory defines come from it */
  expect_edits ("example.com/gpu=only-etc", dirs, NULL, NULL, "env ONLY=etc\n");
  expect_edits ("example.com/gpu=only-run", dirs, NULL, NULL, "env ONLY=run\n");
  /* within a directory, files in name order: the later one wins */
  cleanup_free char *one = dir_named ("cdi-one");
  write_file (one, "10-a.yaml", a);
  write_file (one, "20-b.json",
              "{\"cdiVersion\": \"0.6.0\", \"kind\": \"example.com/gpu\", \"devices\": "
              "[{\"name\": \"0\", \"containerEdits\": {\"env\": [\"FROM=json\"]}}]}");
  char *d1[] = { one, NULL };
  expect_edits ("example.com/gpu=0", d1, NULL, NULL, "env FROM=json\n");
}

static void
test_cdi_errors (void **state)
{
  (void) state;
  cleanup_free char *d = dir_named ("cdi-err");
  cleanup_free char *missing = ib_path_join (tmp, "cdi-none");
  write_file (d, "spec.json", json_spec);
  char *dirs[] = { d, missing, NULL };
  cleanup_free char *msg = xasprintf ("CDI device example.com/gpu=3: not found in %s, %s "
                                      "(devices: 0, GPU-abc)",
                                      d, missing);
  expect_error ("example.com/gpu=3", dirs, msg);
  /* "all" is a name like any other: not made up when the spec lacks it */
  free (msg);
  msg = xasprintf ("CDI device example.com/gpu=all: not found in %s, %s (devices: 0, GPU-abc)", d,
                   missing);
  expect_error ("example.com/gpu=all", dirs, msg);
  /* another vendor: CDI only, no discovery */
  free (msg);
  msg = xasprintf ("--device acme.io/tpu=0: no CDI spec of kind acme.io/tpu in %s, %s", d,
                   missing);
  expect_error ("acme.io/tpu=0", dirs, msg);
  /* malformed requests */
  static const char *const bad[] = { "gpu", "nvidia.com/gpu", "nvidia.com/gpu=", "=0",
                                     "/gpu=0", "nvidia.com/=0", "nvidia.com=0/x", NULL };
  for (int i = 0; bad[i]; i++)
    {
      cleanup_free char *m = xasprintf ("--device %s: expected a CDI device name "
                                        "vendor.com/class=NAME (e.g. nvidia.com/gpu=all)",
                                        bad[i]);
      expect_error (bad[i], dirs, m);
    }
}

static void
test_cdi_bad_files (void **state)
{
  (void) state;
  struct
  {
    const char *name, *text, *what;
  } cases[] = {
    { "bad.yaml", "cdiVersion: 0.6.0\nkind: example.com/gpu\ndevices:\n  - name: x\n   bad: [\n",
      "line 5: did not find expected '-' indicator" },
    { "nokind.yaml", "cdiVersion: 0.6.0\ndevices: []\n",
      "needs \"kind\": \"vendor.com/class\" and a \"devices\" list" },
    { "badkind.yml", "cdiVersion: 0.6.0\nkind: gpu\ndevices: []\n",
      "needs \"kind\": \"vendor.com/class\" and a \"devices\" list" },
    { "nodevices.json", "{\"cdiVersion\": \"0.6.0\", \"kind\": \"example.com/gpu\"}",
      "needs \"kind\": \"vendor.com/class\" and a \"devices\" list" },
    { "list.yaml", "- a\n- b\n", "needs \"kind\": \"vendor.com/class\" and a \"devices\" list" },
    { "empty.yaml", "", "empty" },
    { "alias.yaml", "a: &x 1\nkind: *x\n", "line 2: YAML aliases are not supported" },
    { "bad.json", "{\"kind\": \"example.com/gpu\",\n \"devices\": [}\n",
      "line 2: unexpected token near '}'" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    {
      cleanup_free char *d = dir_named ("cdi-bad");
      write_file (d, "0-good.json", json_spec);
      write_file (d, cases[i].name, cases[i].text);
      char *dirs[] = { d, NULL };
      cleanup_free char *msg = xasprintf ("CDI spec %s/%s: %s", d, cases[i].name, cases[i].what);
      expect_error ("example.com/gpu=0", dirs, msg);
    }
}

/* The hooks as nvidia-ctk writes them (nvidia-cdi-hook, or the older
 * `nvidia-ctk hook`), with both option spellings. */
static const char hooks_spec[]
    = "cdiVersion: 0.6.0\n"
      "kind: nvidia.com/gpu\n"
      "devices:\n"
      "- name: \"0\"\n"
      "  containerEdits:\n"
      "    deviceNodes: [{path: /dev/nvidia0}]\n"
      "containerEdits:\n"
      "  hooks:\n"
      "  - hookName: createContainer\n"
      "    path: /usr/bin/nvidia-cdi-hook\n"
      "    args: [nvidia-cdi-hook, create-symlinks, --link, libcuda.so.1::/usr/lib64/libcuda.so,\n"
      "           --link=../libnvidia-allocator.so.1::/usr/lib64/gbm/nvidia-drm_gbm.so]\n"
      "  - hookName: createContainer\n"
      "    path: /usr/bin/nvidia-ctk\n"
      "    args: [nvidia-ctk, hook, update-ldcache, --folder, /usr/lib64, --folder=/opt/nv/lib,\n"
      "           --folder, /usr/lib64]\n"
      "  - hookName: createContainer\n"
      "    path: /usr/local/bin/nvidia-cdi-hook\n"
      "    args: [nvidia-cdi-hook, chmod, --mode, '755', --path, /dev/dri]\n"
      "  - hookName: createContainer\n"
      "    path: /usr/bin/nvidia-cdi-hook\n"
      "    args: [nvidia-cdi-hook, enable-cuda-compat, --host-driver-version=550.54.15]\n"
      "  - hookName: createContainer\n"
      "    path: /usr/bin/nvidia-cdi-hook\n"
      "    args: [nvidia-cdi-hook, disable-device-node-modification]\n"
      "  - hookName: createContainer\n"
      "    path: /usr/bin/foo\n"
      "    args: [foo, --all]\n"
      "    env: [A=1]\n"
      "  - hookName: startContainer\n"
      "    path: /usr/bin/nvidia-cdi-hook\n"
      "    args: [nvidia-cdi-hook, do-something-new]\n";

static void
test_cdi_hooks (void **state)
{
  (void) state;
  cleanup_free char *d = dir_named ("cdi-hooks");
  write_file (d, "nvidia.yaml", hooks_spec);
  char *dirs[] = { d, NULL };
  int saved = ib_verbosity;
  ib_verbosity = 2;
  log_start ();
  expect_edits ("nvidia.com/gpu=0", dirs, NULL, NULL,
                "bind /dev/nvidia0 -> /dev/nvidia0 ro\n"
                "link /usr/lib64/libcuda.so -> libcuda.so.1\n"
                "link /usr/lib64/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1\n"
                "ldconfig /usr/lib64 /opt/nv/lib\n");
  log_stop ();
  ib_verbosity = saved;
  /* one warning for each hook not run, naming it; the known ones that are
   * skipped only show in debug output */
  ib_buf_t got = { 0 };
  replace_into (&got, logged.data, d, "$D");
  assert_string_equal (
      got.data,
      "debug: imgbuild: debug: CDI spec $D/nvidia.yaml: hook nvidia-cdi-hook chmod skipped "
      "(not needed in imgbuild's sandbox)\n"
      "debug: imgbuild: debug: CDI spec $D/nvidia.yaml: hook nvidia-cdi-hook enable-cuda-compat "
      "skipped (not needed in imgbuild's sandbox)\n"
      "debug: imgbuild: debug: CDI spec $D/nvidia.yaml: hook nvidia-cdi-hook "
      "disable-device-node-modification skipped (not needed in imgbuild's sandbox)\n"
      "warning: imgbuild: warning: CDI hook /usr/bin/foo (createContainer) in $D/nvidia.yaml is "
      "not run: imgbuild runs only the NVIDIA hooks it knows\n"
      "warning: imgbuild: warning: CDI hook /usr/bin/nvidia-cdi-hook do-something-new "
      "(startContainer) in $D/nvidia.yaml is not run: imgbuild runs only the NVIDIA hooks it "
      "knows\n"
      "debug: imgbuild: debug: CDI device nvidia.com/gpu=0 from $D/nvidia.yaml\n");
  ib_buf_free (&got);
  ib_buf_free (&logged);
  memset (&logged, 0, sizeof logged);
}

static void
test_edits_accumulate (void **state)
{
  (void) state;
  cleanup_free char *d = dir_named ("cdi-acc");
  write_file (d, "spec.json", json_spec);
  char *dirs[] = { d, NULL };
  ib_gpu_opts_t o = { .spec_dirs = dirs };
  ib_gpu_edits_t e = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_gpu_resolve ("example.com/gpu=0", &o, &e, &err), 0);
  assert_int_equal (ib_gpu_resolve ("example.com/gpu=GPU-abc", &o, &e, &err), 0);
  /* a failing request leaves what earlier ones added */
  assert_int_equal (ib_gpu_resolve ("example.com/gpu=9", &o, &e, &err), -1);
  ib_error_free (&err);
  cleanup_free char *got = show (&e);
  /* a mount target is bound once (the first request's); env accumulates */
  assert_string_equal (got, "bind /dev/ctl -> /dev/ctl ro\n"
                            "bind /host/lib -> /usr/lib/x ro\n"
                            "bind /host/dev/card0 -> /dev/card0 ro\n"
                            "bind /host/data -> /data ro\n"
                            "env TOP=1\n"
                            "env DEV=0\n"
                            "env TOP=1\n"
                            "env DEV=abc\n");
  ib_gpu_edits_free (&e);
  ib_gpu_edits_t zero = { 0 };
  assert_memory_equal (&e, &zero, sizeof e);
  ib_gpu_edits_free (&e); /* twice is harmless */
}

/* --- NVIDIA discovery on the fake driver tree ---------------------------- */

static char *empty_dir; /* a CDI dir with no spec */

static const char ctl_nodes[] = "bind $ROOT/dev/nvidiactl -> /dev/nvidiactl ro\n"
                                "bind $ROOT/dev/nvidia-uvm -> /dev/nvidia-uvm ro\n"
                                "bind $ROOT/dev/nvidia-uvm-tools -> /dev/nvidia-uvm-tools ro\n";
static const char caps_node[] = "bind $ROOT/dev/nvidia-caps/nvidia-cap1 -> "
                                "/dev/nvidia-caps/nvidia-cap1 ro\n";
#define LIBDIR "/usr/lib/x86_64-linux-gnu"
#define LIB LIBDIR "/"
#define BIND_LIB(l) "bind $ROOT" LIB l ".so.999.01 -> " LIB l ".so.999.01 ro\n"
#define LINK_LIB(l) "link " LIB l ".so.1 -> " l ".so.999.01\n"
static const char smi[] = "bind $ROOT/usr/bin/nvidia-smi -> /usr/bin/nvidia-smi ro\n";

/* compute,utility (the default): utility libraries first, then compute. */
static char *
default_libs (void)
{
  return xasprintf ("%s%s%s%s", BIND_LIB ("libnvidia-ml"), BIND_LIB ("libcuda"),
                    BIND_LIB ("libnvidia-ptxjitcompiler"), smi);
}
static const char default_links[] = LINK_LIB ("libnvidia-ml") LINK_LIB ("libcuda")
    LINK_LIB ("libnvidia-ptxjitcompiler");

static void
expect_discovery (const char *request, const char *visible, const char *caps, const char *gpus,
                  const char *libs, const char *links, const char *env_visible)
{
  char *dirs[] = { empty_dir, NULL };
  cleanup_free char *want = xasprintf ("%s%s%s%s%senv NVIDIA_VISIBLE_DEVICES=%s\n%s", ctl_nodes,
                                       gpus, caps_node, libs, links, env_visible,
                                       *links ? "ldconfig " LIBDIR "\n" : "");
  expect_edits (request, dirs, visible, caps, want);
}

static const char gpu0[] = "bind $ROOT/dev/nvidia0 -> /dev/nvidia0 ro\n";
static const char gpu1[] = "bind $ROOT/dev/nvidia1 -> /dev/nvidia1 ro\n";
#define UUID1 "GPU-11111111-1111-1111-1111-111111111111"
#define UUID2 "GPU-22222222-2222-2222-2222-222222222222"

static void
test_discovery_selection (void **state)
{
  (void) state;
  cleanup_free char *libs = default_libs ();
  cleanup_free char *both = xasprintf ("%s%s", gpu0, gpu1);
  expect_discovery ("nvidia.com/gpu=all", NULL, NULL, both, libs, default_links, "all");
  expect_discovery ("nvidia.com/gpu=0", NULL, NULL, gpu0, libs, default_links, "0");
  expect_discovery ("nvidia.com/gpu=1", NULL, NULL, gpu1, libs, default_links, "1");
  expect_discovery ("nvidia.com/gpu=" UUID2, NULL, NULL, gpu1, libs, default_links, UUID2);
  expect_discovery ("nvidia.com/gpu=1," UUID1, NULL, NULL, both, libs, default_links,
                    "1," UUID1);
  /* NVIDIA_VISIBLE_DEVICES narrows "all" only */
  expect_discovery ("nvidia.com/gpu=all", "1", NULL, gpu1, libs, default_links, "1");
  expect_discovery ("nvidia.com/gpu=all", UUID1, NULL, gpu0, libs, default_links, UUID1);
  expect_discovery ("nvidia.com/gpu=all", "all", NULL, both, libs, default_links, "all");
  expect_discovery ("nvidia.com/gpu=all", "", NULL, both, libs, default_links, "all");
  expect_discovery ("nvidia.com/gpu=0", "1", NULL, gpu0, libs, default_links, "0");
  /* none: the driver without any GPU; void: nothing at all */
  expect_discovery ("nvidia.com/gpu=all", "none", NULL, "", libs, default_links, "none");
  char *dirs[] = { empty_dir, NULL };
  expect_edits ("nvidia.com/gpu=all", dirs, "void", NULL, "");
}

/* ib_gpu_restrict (a Slurm task's SLURM_JOB_GPUS): only the job's GPUs,
 * numbered among themselves */
static void
test_discovery_restricted (void **state)
{
  (void) state;
  cleanup_free char *libs = default_libs ();
  cleanup_free char *both = xasprintf ("%s%s", gpu0, gpu1);
  ib_gpu_restrict ("1");
  expect_discovery ("nvidia.com/gpu=all", NULL, NULL, gpu1, libs, default_links, "1");
  expect_discovery ("nvidia.com/gpu=0", NULL, NULL, gpu1, libs, default_links, "1");
  ib_gpu_restrict ("0,1");
  expect_discovery ("nvidia.com/gpu=all", NULL, NULL, both, libs, default_links, "0,1");
  expect_discovery ("nvidia.com/gpu=1", NULL, NULL, gpu1, libs, default_links, "1");
  ib_gpu_restrict ("1");
  char *dirs[] = { empty_dir, NULL };
  ib_gpu_opts_t o = { .spec_dirs = dirs };
  ib_gpu_edits_t e = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_gpu_resolve ("nvidia.com/gpu=1", &o, &e, &err), -1);
  assert_string_equal (err->msg, "--device nvidia.com/gpu=1: the job was given 1 GPU");
  ib_error_free (&err);
  assert_int_equal (ib_gpu_resolve ("nvidia.com/gpu=" UUID1, &o, &e, &err), -1);
  assert_true (strstr (err->msg, "only GPUs by index or all") != NULL);
  ib_error_free (&err);
  ib_gpu_restrict ("");
  assert_int_equal (ib_gpu_resolve ("nvidia.com/gpu=all", &o, &e, &err), -1);
  assert_string_equal (err->msg, "--device nvidia.com/gpu=all: the job was given no GPU");
  ib_error_free (&err);
  ib_gpu_edits_free (&e);
  ib_gpu_restrict (NULL);
  expect_discovery ("nvidia.com/gpu=all", NULL, NULL, both, libs, default_links, "all");
}

static void
test_discovery_capabilities (void **state)
{
  (void) state;
  cleanup_free char *both = xasprintf ("%s%s", gpu0, gpu1);
  expect_discovery ("nvidia.com/gpu=all", NULL, "utility", both,
                    BIND_LIB ("libnvidia-ml") "bind $ROOT/usr/bin/nvidia-smi -> "
                                              "/usr/bin/nvidia-smi ro\n",
                    LINK_LIB ("libnvidia-ml"), "all");
  expect_discovery ("nvidia.com/gpu=all", NULL, "compute", both,
                    BIND_LIB ("libcuda") BIND_LIB ("libnvidia-ptxjitcompiler"),
                    LINK_LIB ("libcuda") LINK_LIB ("libnvidia-ptxjitcompiler"), "all");
  expect_discovery ("nvidia.com/gpu=all", NULL, "video", both, BIND_LIB ("libnvidia-encode"),
                    LINK_LIB ("libnvidia-encode"), "all");
  /* graphics: the tree has no graphics library, so no library at all */
  expect_discovery ("nvidia.com/gpu=all", NULL, "graphics", both, "", "", "all");
  cleanup_free char *all_libs = xasprintf (
      "%s%s%s%s%s", BIND_LIB ("libnvidia-ml"), BIND_LIB ("libcuda"),
      BIND_LIB ("libnvidia-ptxjitcompiler"), BIND_LIB ("libnvidia-encode"), smi);
  expect_discovery ("nvidia.com/gpu=all", NULL, "all", both, all_libs,
                    LINK_LIB ("libnvidia-ml") LINK_LIB ("libcuda")
                        LINK_LIB ("libnvidia-ptxjitcompiler") LINK_LIB ("libnvidia-encode"),
                    "all");
  cleanup_free char *libs = default_libs ();
  expect_discovery ("nvidia.com/gpu=0", NULL, "compute,utility", gpu0, libs, default_links, "0");
  expect_discovery ("nvidia.com/gpu=0", NULL, "utility,compute", gpu0, libs, default_links, "0");
  expect_discovery ("nvidia.com/gpu=0", NULL, "", gpu0, libs, default_links, "0");
}

static void
test_discovery_errors (void **state)
{
  (void) state;
  char *dirs[] = { empty_dir, NULL };
  expect_error ("nvidia.com/gpu=7", dirs, "--device nvidia.com/gpu=7: no GPU '7' (2 GPUs found)");
  expect_error ("nvidia.com/gpu=GPU-nope", dirs,
                "--device nvidia.com/gpu=GPU-nope: no GPU 'GPU-nope' (2 GPUs found)");
  /* no driver: no /dev/nvidiactl under the root */
  cleanup_free char *nodrv = dir_named ("no-driver");
  assert_int_equal (setenv ("IMGBUILD_NVIDIA_ROOT", nodrv, 1), 0);
  cleanup_free char *msg = xasprintf ("--device nvidia.com/gpu=all: no CDI spec in %s and no "
                                      "NVIDIA driver found (%s/dev/nvidiactl missing)",
                                      empty_dir, nodrv);
  expect_error ("nvidia.com/gpu=all", dirs, msg);
  assert_int_equal (setenv ("IMGBUILD_NVIDIA_ROOT", fake, 1), 0);
  /* an ldconfig that fails */
  assert_int_equal (setenv ("IMGBUILD_LDCONFIG", "/bin/false", 1), 0);
  expect_error ("nvidia.com/gpu=all", dirs, "NVIDIA discovery: /bin/false -p failed");
  cleanup_free char *ld = ib_path_join (fake, "ldconfig");
  assert_int_equal (setenv ("IMGBUILD_LDCONFIG", ld, 1), 0);
}

/* A CDI spec of kind nvidia.com/gpu takes over: no discovery. */
static void
test_cdi_spec_before_discovery (void **state)
{
  (void) state;
  cleanup_free char *d = ib_path_join (fake, "cdi");
  char *dirs[] = { d, NULL };
  expect_edits ("nvidia.com/gpu=" UUID2, dirs, NULL, NULL,
                "bind $ROOT/dev/nvidiactl -> /dev/nvidiactl ro\n"
                "bind $ROOT" LIB "libcuda.so.999.01 -> " LIB "libcuda.so.999.01 ro\n"
                "bind $ROOT/usr/bin/nvidia-smi -> /usr/bin/nvidia-smi ro\n"
                "bind $ROOT/dev/nvidia1 -> /dev/nvidia1 ro\n"
                "link " LIB "libcuda.so.1 -> libcuda.so.999.01\n"
                "env NVIDIA_VISIBLE_DEVICES=void\n"
                "env FROM_CDI=yes\n"
                "ldconfig " LIBDIR "\n");
  /* the spec has no device 7: an error, not discovery */
  cleanup_free char *msg = xasprintf ("CDI device nvidia.com/gpu=7: not found in %s (devices: 0, "
                                      UUID2 ", all)",
                                      d);
  expect_error ("nvidia.com/gpu=7", dirs, msg);
}

/* Without /proc/driver/nvidia, the GPUs are the /dev/nvidiaN nodes. */
static void
test_discovery_without_proc (void **state)
{
  (void) state;
  cleanup_free char *proc = ib_path_join (fake, "proc");
  cleanup_free char *hidden = ib_path_join (fake, "proc.hidden");
  assert_int_equal (rename (proc, hidden), 0);
  cleanup_free char *libs = default_libs ();
  cleanup_free char *both = xasprintf ("%s%s", gpu0, gpu1);
  expect_discovery ("nvidia.com/gpu=all", NULL, NULL, both, libs, default_links, "all");
  expect_discovery ("nvidia.com/gpu=1", NULL, NULL, gpu1, libs, default_links, "1");
  char *dirs[] = { empty_dir, NULL };
  expect_error ("nvidia.com/gpu=" UUID1, dirs,
                "--device nvidia.com/gpu=" UUID1 ": no GPU '" UUID1 "' (2 GPUs found)");
  assert_int_equal (rename (hidden, proc), 0);
}

/* IMGBUILD_NVIDIA_ROOT given through a symlink: the libraries are found all
 * the same (their real paths are under the root's real path). */
static void
test_discovery_root_through_symlink (void **state)
{
  (void) state;
  cleanup_free char *link = ib_path_join (tmp, "fake-link");
  unlink (link);
  assert_int_equal (symlink (fake, link), 0);
  assert_int_equal (setenv ("IMGBUILD_NVIDIA_ROOT", link, 1), 0);
  cleanup_free char *libs = default_libs ();
  expect_discovery ("nvidia.com/gpu=0", NULL, NULL, gpu0, libs, default_links, "0");
  assert_int_equal (setenv ("IMGBUILD_NVIDIA_ROOT", fake, 1), 0);
  unlink (link);
}

/* A merged-/usr host whose cache lists /lib/x86_64-linux-gnu/libcuda.so.1
 * while the real file is /usr/lib/x86_64-linux-gnu/libcuda.so.999.01: the
 * soname link (in /lib/...) points at the real file by its full path, not
 * at a file of that name next to the link. */
static void
test_discovery_soname_in_another_dir (void **state)
{
  (void) state;
  cleanup_free char *libdir = ib_path_join (fake, "lib");
  assert_int_equal (symlink ("usr/lib", libdir), 0);
  cleanup_free char *ld = ib_path_join (tmp, "ldconfig-merged");
  const char *script = "#!/bin/sh\n"
                       "printf '\\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/"
                       "libcuda.so.1\\n'\n"
                       "printf '\\tlibnvidia-ml.so.1 (libc6,x86-64) => " LIB
                       "libnvidia-ml.so.1\\n'\n";
  ib_error_t err = NULL;
  assert_int_equal (ib_write_file_atomic (ld, script, strlen (script), 0755, &err), 0);
  assert_int_equal (setenv ("IMGBUILD_LDCONFIG", ld, 1), 0);
  expect_discovery ("nvidia.com/gpu=0", NULL, NULL, gpu0,
                    BIND_LIB ("libnvidia-ml") BIND_LIB ("libcuda") "bind $ROOT/usr/bin/nvidia-smi "
                                                                   "-> /usr/bin/nvidia-smi ro\n",
                    LINK_LIB ("libnvidia-ml") "link /lib/x86_64-linux-gnu/libcuda.so.1 -> " LIB
                                              "libcuda.so.999.01\n",
                    "0");
  cleanup_free char *fake_ld = ib_path_join (fake, "ldconfig");
  assert_int_equal (setenv ("IMGBUILD_LDCONFIG", fake_ld, 1), 0);
  unlink (libdir);
}

/* --- setup ----------------------------------------------------------------- */

static int
setup (void **state)
{
  (void) state;
  char t[] = "/tmp/ib-gpu-XXXXXX";
  if (mkdtemp (t) == NULL || realpath (t, tmp) == NULL)
    return -1;
  fake = ib_path_join (tmp, "fake");
  cleanup_free char *cmd = xasprintf ("bash tests/fixtures/gpu/make_fake_driver.sh '%s'", fake);
  if (system (cmd) != 0)
    {
      fprintf (stderr, "test_gpu: %s failed (run from the source tree's root)\n", cmd);
      return -1;
    }
  cleanup_free char *ld = ib_path_join (fake, "ldconfig");
  setenv ("IMGBUILD_NVIDIA_ROOT", fake, 1);
  setenv ("IMGBUILD_LDCONFIG", ld, 1);
  empty_dir = dir_named ("cdi-empty-dir");
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  if (getenv ("IB_TEST_KEEP") == NULL && ib_rm_rf (tmp, &err) < 0)
    ib_error_free (&err);
  free (fake);
  free (empty_dir);
  return 0;
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_cdi_json_and_yaml),
    cmocka_unit_test (test_cdi_ignores_other_files_and_kinds),
    cmocka_unit_test (test_cdi_yaml_plain_number_names),
    cmocka_unit_test (test_cdi_later_dirs_win),
    cmocka_unit_test (test_cdi_errors),
    cmocka_unit_test (test_cdi_bad_files),
    cmocka_unit_test (test_cdi_hooks),
    cmocka_unit_test (test_edits_accumulate),
    cmocka_unit_test (test_discovery_selection),
    cmocka_unit_test (test_discovery_restricted),
    cmocka_unit_test (test_discovery_capabilities),
    cmocka_unit_test (test_discovery_errors),
    cmocka_unit_test (test_cdi_spec_before_discovery),
    cmocka_unit_test (test_discovery_without_proc),
    cmocka_unit_test (test_discovery_root_through_symlink),
    cmocka_unit_test (test_discovery_soname_in_another_dir),
  };
  return cmocka_run_group_tests (tests, setup, teardown);
}
