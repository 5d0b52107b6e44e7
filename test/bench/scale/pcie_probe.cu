// pcie_probe: the copy rates of this machine over MB megabytes (default
// 1024), best of five: host to device from pageable memory (what a palloc'd
// buffer gives) and from pinned memory, and device to pageable host memory.
// Prints "h2d-pageable h2d-pinned d2h-pageable", in GB/s.
//   nvcc -O2 -o pcie_probe pcie_probe.cu && ./pcie_probe [MB]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static double rate(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
	double best = 0;
	for (int i = 0; i < 5; i++) {
		double t0 = now();
		if (cudaMemcpy(dst, src, bytes, kind) != cudaSuccess) return -1;
		cudaDeviceSynchronize();
		double r = bytes / (now() - t0) / 1e9;
		if (r > best) best = r;
	}
	return best;
}

int main(int argc, char **argv)
{
	size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024, bytes = mb << 20;
	void *dev, *pinned, *pageable = malloc(bytes);
	if (!pageable || cudaMalloc(&dev, bytes) != cudaSuccess || cudaMallocHost(&pinned, bytes) != cudaSuccess) {
		fprintf(stderr, "pcie_probe: cannot allocate %zu MB\n", mb);
		return 1;
	}
	memset(pageable, 1, bytes);
	memset(pinned, 1, bytes);
	printf("%.2f %.2f %.2f\n", rate(dev, pageable, bytes, cudaMemcpyHostToDevice),
		   rate(dev, pinned, bytes, cudaMemcpyHostToDevice), rate(pageable, dev, bytes, cudaMemcpyDeviceToHost));
	return 0;
}
