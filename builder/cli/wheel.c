/* imgbuild wheel audit|repair (builder/wheel.h). */
#include "builder/cli/cli.h"
#include "builder/wheel/wheel.h"
#include "common/util.h"

#include <getopt.h>
#include <string.h>

/* imgbuild wheel audit FILE.whl [--json] | wheel repair FILE.whl --plat TAG [-w DIR]
 * [--exclude PATTERN]... */
int
cmd_wheel (int argc, char **argv, ib_error_t *err)
{
  if (argc < 2)
    usage_error ("%s", "wheel: expected audit or repair");
  const char *sub = argv[1];
  bool audit = strcmp (sub, "audit") == 0 || strcmp (sub, "show") == 0;
  if (!audit && strcmp (sub, "repair") != 0)
    usage_error ("wheel: unknown subcommand '%s' (audit or repair)", sub);
  enum { OPT_JSON = 0x300, OPT_PLAT, OPT_EXCLUDE, OPT_PATCHELF, OPT_ROOT };
  static const struct option opts[] = {
    { "json", no_argument, NULL, OPT_JSON },          { "plat", required_argument, NULL, OPT_PLAT },
    { "wheel-dir", required_argument, NULL, 'w' },    { "exclude", required_argument, NULL, OPT_EXCLUDE },
    { "patchelf", required_argument, NULL, OPT_PATCHELF }, { "root", required_argument, NULL, OPT_ROOT },
    GLOBAL_OPTIONS, { NULL, 0, NULL, 0 },
  };
  bool json = false;
  const char *plat = NULL, *dir = "wheelhouse", *patchelf = NULL, *root = NULL;
  cleanup_strv char **exclude = NULL;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc - 1, argv + 1, "w:q", opts, NULL)) != -1)
    switch (c)
      {
      case OPT_JSON: json = true; break;
      case OPT_PLAT: plat = optarg; break;
      case 'w': dir = optarg; break;
      case OPT_EXCLUDE: ib_strv_push (&exclude, optarg); break;
      case OPT_PATCHELF: patchelf = optarg; break;
      case OPT_ROOT: root = optarg; break;
      default:
        if (!global_option (c, optarg, "wheel"))
          usage_error ("%s", "wheel: bad option");
        break;
      }
  if (optind + 2 != argc)
    usage_error ("wheel %s: expected one FILE.whl", sub);
  const char *file = argv[optind + 1];
  if (audit)
    {
      if (plat || exclude || patchelf)
        usage_error ("%s", "wheel audit: --plat, -w, --exclude and --patchelf are for repair");
      ib_wheel_t *w = NULL;
      ib_wheel_audit_t *a = NULL;
      if (ib_wheel_open (file, &w, err) < 0)
        return -1;
      ib_wheel_audit_opts_t ao = { .root = root };
      if (ib_wheel_audit (w, &ao, &a, err) < 0)
        {
          ib_wheel_close (w);
          return -1;
        }
      if (json)
        {
          json_t *j = ib_wheel_audit_json (a);
          json_dumpf (j, stdout, JSON_PRESERVE_ORDER);
          printf ("\n");
          json_decref (j);
        }
      else
        {
          cleanup_free char *text = ib_wheel_audit_show (a);
          fputs (text, stdout);
        }
      ib_wheel_audit_free (a);
      ib_wheel_close (w);
      return 0;
    }
  if (json)
    usage_error ("%s", "wheel repair: --json is for audit");
  if (!plat)
    usage_error ("%s", "wheel repair: --plat TAG is required (like manylinux_2_17_x86_64)");
  ib_wheel_repair_opts_t ro = { .plat = plat, .out_dir = dir, .exclude = exclude,
                                .patchelf = patchelf, .root = root };
  cleanup_free char *out = NULL;
  if (ib_wheel_repair (file, &ro, &out, err) < 0)
    return -1;
  printf ("%s\n", out);
  return 0;
}
