/* oci/shortname.h — short names ("debian:12", "pypa/manylinux2014_x86_64")
 * resolved as containers-registries.conf(5) "SHORT-NAME RESOLUTION" says,
 * so that a FROM or a pull means what it means to podman and buildah on
 * the same machine:
 *   1. a name with a registry ("quay.io/x", "localhost:5000/x") is itself;
 *   2. an alias of [aliases] (Debian's podman ships
 *      /etc/containers/registries.conf.d/shortnames.conf) is its value,
 *      with the name's tag or digest;
 *   3. with unqualified-search-registries set, each registry in order
 *      (docker.io adds "library/" to a one-component name); when it lists
 *      more than one and short-name-mode is enforcing (or not set),
 *      imgbuild, which never prompts, refuses the name as ambiguous;
 *   4. else Docker's rule: docker.io (ib_ref_parse), as before.
 * The candidates are tried in order: the first in the store, else the
 * first that pulls. */
#ifndef IB_OCI_SHORTNAME_H
#define IB_OCI_SHORTNAME_H

#include "common/error.h"
#include "oci/regconf.h"
#include "oci/store.h"

/* The references `name` may stand for, in order, as a NULL-terminated
 * vector (caller frees): one element (the name itself, or its alias), or
 * several (search registries).  *how (may be NULL; caller frees) says
 * where they came from for messages ("alias centos in FILE",
 * "unqualified-search-registries of FILE"), NULL for rules 1 and 4.
 * `c` may be NULL (no configuration: rules 1 and 4).  Errors (EINVAL):
 * an ambiguous name in enforcing mode, naming the registries and the two
 * ways out; an empty search list. */
int ib_short_name_resolve (const ib_regconf_t *c, const char *name, char ***candidates,
                           char **how, ib_error_t *err);

/* The index of the first candidate the store has a tag for, or -1. */
int ib_short_name_stored (ib_store_t *store, char *const *candidates);

/* The reference to use for `name` (a FROM, a pull, a run): its only
 * candidate (ib_short_name_resolve, with the registries configuration of
 * the process, ib_regconf_get), else the first candidate in the store,
 * else the first that pulls for os/arch/variant (each may be NULL: the
 * host's), `before_pull(ud)` (may be NULL) called once before the first
 * pull (a build pauses its display).  *chosen is the caller's.  Errors:
 * ib_short_name_resolve's; when no candidate pulls, each one's error. */
int ib_short_name_choose (ib_store_t *store, const char *name, const char *os, const char *arch,
                          const char *variant, void (*before_pull) (void *), void *ud,
                          char **chosen, ib_error_t *err);

#endif
