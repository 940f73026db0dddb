/* rootfs/gpu.h — devices for the sandbox: CDI specs (Container Device
 * Interface, cncf-tags/container-device-interface SPEC.md) and, where no
 * spec names an NVIDIA GPU, discovery of the NVIDIA driver as
 * libnvidia-container and enroot do.  The result is a set of edits that
 * ib_sandbox_run applies: bind mounts (device nodes are bound from the
 * host: a user namespace cannot mknod), symlinks, environment, ldconfig.
 */
#ifndef IB_ROOTFS_GPU_H
#define IB_ROOTFS_GPU_H

#include "common/error.h"
#include "rootfs/sandbox.h"
#include <stdbool.h>

typedef struct ib_gpu_opts
{
  /* CDI spec directories, in increasing priority (a device defined in a
   * later directory wins); NULL = { "/etc/cdi", "/var/run/cdi" }. */
  char *const *spec_dirs;
  /* NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES of the step's
   * environment (the image's ENV), or NULL.  Used by discovery only. */
  const char *visible_devices;
  const char *capabilities;
} ib_gpu_opts_t;

typedef struct ib_gpu_edits
{
  ib_mount_t *mounts;            /* all bind mounts */
  size_t n_mounts;
  ib_sandbox_symlink_t *symlinks;
  size_t n_symlinks;
  char **env;                    /* "K=V", NULL-terminated or NULL */
  bool ldconfig;
  char **ldconfig_dirs;          /* NULL-terminated or NULL */
  char **owned;                  /* strings the above point into */
} ib_gpu_edits_t;

/* Resolve one device request ("vendor.com/class=NAME", e.g.
 * "nvidia.com/gpu=all", "nvidia.com/gpu=0", "nvidia.com/gpu=GPU-<uuid>")
 * and append its edits to *edits (zero-initialise it before the first
 * call; several requests accumulate).
 *
 * CDI first: every *.json, *.yaml and *.yml file of the spec dirs is read
 * (YAML through libyaml); the spec whose `kind` matches and that defines
 * the device NAME gives the spec's and the device's containerEdits:
 * deviceNodes (hostPath, else path, bound on path), mounts (hostPath on
 * containerPath, read-only with the "ro" option), env, and the hooks that
 * nvidia-ctk writes, interpreted rather than run (`update-ldcache
 * --folder DIR`: ldconfig with DIR; `create-symlinks --link TARGET::LINK`:
 * a symlink; chmod, enable-cuda-compat and
 * disable-device-node-modification are skipped).  Other hooks are never
 * run: one warning names each.  Host programs are never executed.
 *
 * Where no spec has the kind "nvidia.com/gpu", the NVIDIA driver is
 * discovered (see gpu.c): device nodes, driver libraries from the host's
 * ld cache (`ldconfig -p`), utility binaries; NVIDIA_VISIBLE_DEVICES
 * narrows "all"; NVIDIA_DRIVER_CAPABILITIES (default compute,utility)
 * selects the library groups.
 *
 * Testing aids (environment): IMGBUILD_NVIDIA_ROOT prefixes every host path
 * that discovery reads or binds (/dev, /proc/driver/nvidia, libraries,
 * binaries); IMGBUILD_LDCONFIG is the command that prints the ld cache.
 *
 * Errors (-1, *edits keeps what earlier calls added): a malformed request;
 * a spec file that does not parse ("CDI spec FILE: ...", naming the
 * line for YAML); a device not found ("CDI device K=N: not found in DIRS
 * (devices: a, b)"); no spec and no NVIDIA driver. */
int ib_gpu_resolve (const char *request, const ib_gpu_opts_t *opts, ib_gpu_edits_t *edits,
                    ib_error_t *err);

/* Restrict "nvidia.com/gpu" requests, process-wide, to the GPUs a
 * scheduler gave the job (`indexes`: "2,5", the host's GPU indexes, as
 * Slurm's SLURM_JOB_GPUS): "all" is all of them, index K the K-th of them
 * (K from 0; K past the end: ENODEV naming the count), a list "0,1" those;
 * any other name (a UUID) is refused (EPERM).  Several GPUs go to discovery
 * as one list, else (a CDI spec that names them one by one) one request
 * each.  NULL lifts the restriction. */
void ib_gpu_restrict (const char *indexes);

/* Every request of `devices` (NULL-terminated; NULL or empty: nothing)
 * resolved into one *edits, with the CDI `spec_dirs` (ib_gpu_opts_t) and
 * NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES taken from `env`
 * (NAME=VALUE, the step's environment, as libnvidia-container reads the
 * container's).  What RUN --device (and build --device) and `imgbuild run
 * --device` both do.  On failure *edits is freed; errors as
 * ib_gpu_resolve's. */
int ib_gpu_resolve_all (char *const *devices, char *const *spec_dirs, char *const *env,
                        ib_gpu_edits_t *edits, ib_error_t *err);

/* Free everything *edits owns and zero it. */
void ib_gpu_edits_free (ib_gpu_edits_t *edits);

#endif
