/* rootfs/lazy_yaml.c — libyaml, loaded on its first use
 * (common/lazylib.h): a stub per function imgbuild calls (CDI specs),
 * checked by the compiler against <yaml.h>. */
#include "common/lazylib.h"

#include <yaml.h>

IB_LAZYLIB (yaml_lib, IB_SONAME_YAML, "CDI specs (YAML)");

IB_LAZY_VOID (yaml_lib, yaml_event_delete, (yaml_event_t *a0), (a0))
IB_LAZY_VOID (yaml_lib, yaml_parser_delete, (yaml_parser_t *a0), (a0))
IB_LAZY (yaml_lib, int, yaml_parser_initialize, (yaml_parser_t *a0), (a0))
IB_LAZY (yaml_lib, int, yaml_parser_parse, (yaml_parser_t *a0, yaml_event_t *a1), (a0, a1))
IB_LAZY_VOID (yaml_lib, yaml_parser_set_input_string, (yaml_parser_t *a0, const unsigned char *a1, size_t a2), (a0, a1, a2))
