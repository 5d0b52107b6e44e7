// pcie_probe: the host-to-device copy rate of this machine, from pageable
// memory (what a palloc'd buffer gives) and from pinned memory, over
// MB megabytes (default 1024), best of five.  Prints "pageable GB/s pinned GB/s".
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

static double rate(void *dst, const void *src, size_t bytes)
{
	double best = 0;
	for (int i = 0; i < 5; i++) {
		double t0 = now();
		if (cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) return -1;
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
	printf("%.2f %.2f\n", rate(dev, pageable, bytes), rate(dev, pinned, bytes));
	return 0;
}
