// Host-side transfer costs: page-locking an existing (pageable) buffer in place, uploading
// from it, and copying into an already pinned buffer with 1-16 threads.
#include <cuda_runtime.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <chrono>
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main() {
  const size_t n = 128ull << 20;
  cudaFree(0);
  void* d;
  cudaMalloc(&d, n);
  for (int huge = 0; huge < 2; huge++) {
    for (int rep = 0; rep < 4; rep++) {
      char* h = (char*)aligned_alloc(2 << 20, n);
      if (huge) madvise(h, n, MADV_HUGEPAGE);
      memset(h, rep + 1, n);
      double t0 = now();
      cudaError_t e = cudaHostRegister(h, n, cudaHostRegisterDefault);
      double t1 = now();
      cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
      double t2 = now();
      cudaHostUnregister(h);
      double t3 = now();
      cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
      double t4 = now();
      printf("hugepage-advice %d rep %d: register %.3f ms (%s), upload from registered %.3f ms, unregister %.3f ms, pageable upload %.3f ms\n",
             huge, rep, (t1 - t0) * 1e3, cudaGetErrorString(e), (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 1e3);
      free(h);
    }
  }
  char* p;
  cudaMallocHost(&p, n);
  char* h = (char*)malloc(n);
  memset(h, 1, n);
  memset(p, 0, n);
  for (int th : {1, 2, 4, 8, 16}) {
    for (int rep = 0; rep < 3; rep++) {
      omp_set_num_threads(th);
      double t0 = now();
#pragma omp parallel for schedule(static)
      for (int c = 0; c < 128; c++) memcpy(p + (size_t)c * (1 << 20), h + (size_t)c * (1 << 20), 1 << 20);
      double t1 = now();
      printf("memcpy into pinned, %d threads: %.3f ms = %.1f GB/s\n", th, (t1 - t0) * 1e3, n / (t1 - t0) / 1e9);
    }
  }
  return 0;
}
