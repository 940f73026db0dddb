/* tests/gpu/cuda_probe.c — a CUDA program with no CUDA toolkit needed to
 * build it: it dlopen()s the driver (libcuda.so.1), JIT-compiles a PTX
 * kernel (libnvidia-ptxjitcompiler), adds 1.0 to a million floats on GPU 0
 * and checks the result.  Used by tests/gpu/run-on-gpu.sh to show that the
 * driver libraries and device nodes imgbuild binds into a sandbox work.
 * Exit 0 and one line "cuda-probe: ..." on success. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*fn_i) ();
static void *lib;

static void *
sym (const char *name)
{
  void *p = dlsym (lib, name);
  if (p == NULL)
    {
      fprintf (stderr, "cuda-probe: %s missing in libcuda.so.1\n", name);
      exit (2);
    }
  return p;
}

#define CHECK(call)                                                                          \
  do                                                                                         \
    {                                                                                        \
      int r_ = (call);                                                                       \
      if (r_ != 0)                                                                           \
        {                                                                                    \
          fprintf (stderr, "cuda-probe: %s failed: CUresult %d\n", #call, r_);              \
          return 1;                                                                          \
        }                                                                                    \
    }                                                                                        \
  while (0)

static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n"
                          ".visible .entry add1(.param .u64 p, .param .u32 n)\n{\n"
                          ".reg .pred %p<2>;\n.reg .b32 %r<6>;\n.reg .b64 %rd<5>;\n.reg .f32 %f<3>;\n"
                          "ld.param.u64 %rd1, [p];\nld.param.u32 %r1, [n];\n"
                          "mov.u32 %r2, %ctaid.x;\nmov.u32 %r3, %ntid.x;\nmov.u32 %r4, %tid.x;\n"
                          "mad.lo.s32 %r5, %r2, %r3, %r4;\nsetp.ge.u32 %p1, %r5, %r1;\n"
                          "@%p1 bra DONE;\ncvta.to.global.u64 %rd2, %rd1;\n"
                          "mul.wide.u32 %rd3, %r5, 4;\nadd.s64 %rd4, %rd2, %rd3;\n"
                          "ld.global.f32 %f1, [%rd4];\nadd.f32 %f2, %f1, 0f3F800000;\n"
                          "st.global.f32 [%rd4], %f2;\nDONE:\nret;\n}\n";

int
main (void)
{
  lib = dlopen ("libcuda.so.1", RTLD_NOW);
  if (lib == NULL)
    {
      fprintf (stderr, "cuda-probe: %s\n", dlerror ());
      return 2;
    }
  int (*cuInit) (unsigned) = sym ("cuInit");
  int (*cuDeviceGetCount) (int *) = sym ("cuDeviceGetCount");
  int (*cuDeviceGet) (int *, int) = sym ("cuDeviceGet");
  int (*cuDeviceGetName) (char *, int, int) = sym ("cuDeviceGetName");
  int (*cuDriverGetVersion) (int *) = sym ("cuDriverGetVersion");
  int (*cuCtxCreate) (void **, unsigned, int) = sym ("cuCtxCreate_v2");
  int (*cuModuleLoadData) (void **, const void *) = sym ("cuModuleLoadData");
  int (*cuModuleGetFunction) (void **, void *, const char *) = sym ("cuModuleGetFunction");
  int (*cuMemAlloc) (unsigned long long *, size_t) = sym ("cuMemAlloc_v2");
  int (*cuMemcpyHtoD) (unsigned long long, const void *, size_t) = sym ("cuMemcpyHtoD_v2");
  int (*cuMemcpyDtoH) (void *, unsigned long long, size_t) = sym ("cuMemcpyDtoH_v2");
  int (*cuLaunchKernel) (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **)
      = sym ("cuLaunchKernel");
  int (*cuCtxSynchronize) (void) = sym ("cuCtxSynchronize");

  int count = 0, dev = 0, ver = 0;
  char name[256];
  void *ctx, *mod, *fn;
  CHECK (cuInit (0));
  CHECK (cuDriverGetVersion (&ver));
  CHECK (cuDeviceGetCount (&count));
  CHECK (cuDeviceGet (&dev, 0));
  CHECK (cuDeviceGetName (name, sizeof name, dev));
  CHECK (cuCtxCreate (&ctx, 0, dev));
  CHECK (cuModuleLoadData (&mod, ptx));
  CHECK (cuModuleGetFunction (&fn, mod, "add1"));
  unsigned n = 1u << 20;
  float *h = malloc (n * sizeof *h);
  for (unsigned i = 0; i < n; i++)
    h[i] = (float) i;
  unsigned long long d;
  CHECK (cuMemAlloc (&d, n * sizeof *h));
  CHECK (cuMemcpyHtoD (d, h, n * sizeof *h));
  void *args[] = { &d, &n };
  CHECK (cuLaunchKernel (fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  CHECK (cuCtxSynchronize ());
  CHECK (cuMemcpyDtoH (h, d, n * sizeof *h));
  for (unsigned i = 0; i < n; i++)
    if (h[i] != (float) i + 1.0f)
      {
        fprintf (stderr, "cuda-probe: wrong result at %u: %f\n", i, h[i]);
        return 1;
      }
  printf ("cuda-probe: %d device(s), device 0 is %s, driver API %d.%d; PTX kernel JIT-compiled, "
          "%u floats computed and checked\n",
          count, name, ver / 1000, (ver % 1000) / 10, n);
  return 0;
}
