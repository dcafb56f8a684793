/* The CUDA driver's fixed costs on this machine, without biogpu: the floor under any
 * command that opens a GPU. Build on the GPU machine: nvcc -O2 -o cuda_floor cuda_floor.c -lcuda
 * Usage: cuda_floor MODE, MODE one of
 *   none      return at once (the process alone)
 *   init      cuInit
 *   query     cuInit + what `biogpu devices` asks (count, name, attributes, total memory)
 *   ctx       query + primary context retained and current, cuMemGetInfo
 *   ctx-drop  ctx, then the primary context released (destroyed) before exit
 *   alloc     ctx + 1 GiB of device memory
 *   pinned    ctx + 256 MiB page-locked host memory
 * Prints each phase's time (ms) to stderr; time the whole process from the shell to see
 * what the exit adds. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

#define CHECK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #x, (int)r); return 1; } } while (0)

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "none";
  if (!strcmp(mode, "none")) return 0;
  double t0 = now();
  CHECK(cuInit(0));
  double t1 = now();
  fprintf(stderr, "cuInit %.1f ms\n", t1 - t0);
  if (!strcmp(mode, "init")) return 0;
  int n = 0, v = 0, major = 0, sms = 0;
  char name[256];
  size_t total = 0, free_b = 0;
  CUdevice dev;
  CHECK(cuDriverGetVersion(&v));
  CHECK(cuDeviceGetCount(&n));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDeviceGetName(name, sizeof name, dev));
  CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CHECK(cuDeviceTotalMem(&total, dev));
  double t2 = now();
  fprintf(stderr, "query %.1f ms (%d x %s, CC %d, %d SMs, driver %d)\n", t2 - t1, n, name, major, sms, v);
  if (!strcmp(mode, "query")) return 0;
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuMemGetInfo(&free_b, &total));
  double t3 = now();
  fprintf(stderr, "context + free memory %.1f ms (%.1f GiB free)\n", t3 - t2, free_b / 1073741824.0);
  if (!strcmp(mode, "ctx-drop")) {
    CHECK(cuDevicePrimaryCtxRelease(dev));
    fprintf(stderr, "release %.1f ms\n", now() - t3);
  } else if (!strcmp(mode, "alloc")) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, (size_t)1 << 30));
    fprintf(stderr, "1 GiB device alloc %.1f ms\n", now() - t3);
  } else if (!strcmp(mode, "pinned")) {
    void *h;
    CHECK(cuMemHostAlloc(&h, (size_t)256 << 20, 0));
    memset(h, 1, (size_t)256 << 20);
    fprintf(stderr, "256 MiB pinned alloc + touch %.1f ms\n", now() - t3);
  }
  return 0;
}
