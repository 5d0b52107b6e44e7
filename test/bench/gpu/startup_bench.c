/*
 * startup_bench.c: what a process's first GPU training pays before its
 * first iteration, step by step, as a fresh backend pays it: the NVIDIA
 * driver and the CUDA libraries the module links (each dlopen'd on its own
 * first, to see its share), the module's probe (which makes the context
 * and loads the module's code for the device), the device's capabilities
 * (gm_cuda_caps: what gpumf_device_info reports; loads the block solver's
 * code), then gm_mf_warmup (the kernels, cuBLAS) for implicit ALS at
 * factors 512 and 64, each twice (the second time is what is left when
 * everything is loaded).  With CUDA_CACHE_DISABLE=1 a PTX-only build pays
 * the driver's compilation in these steps (test/bench/gpu/arch_run.sh).
 *
 *     make -C cuda startup-bench && ./test/bench/gpu/startup_bench [module path]
 *
 * Run it twice in a row: the first run also reads the libraries from disk.
 * A second argument picks what is measured between the probe and the
 * warm-ups: "plain" (nothing), "split" (the context alone, through the
 * shared CUDA runtime, then cuBLAS's handle and its first product, so that
 * the first warm-up shows what is left: the module's own kernels), or
 * "parallel" (the driver's initialisation and the device's primary context
 * on a second thread while the libraries load).
 */
#include "gm_core.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the driver's and the runtime's entry points used here, by dlsym */
typedef int (*cu_init_fn) (unsigned);
typedef int (*cu_dev_get_fn) (int *, int);
typedef int (*cu_ctx_retain_fn) (void **, int);
typedef int (*cuda_free_fn) (void *);
typedef int (*blas_create_fn) (void **);
typedef int (*blas_sgemm_fn) (void *, int, int, int, int, int, const float *,
							  const float *, int, const float *, int, const float *,
							  float *, int);
typedef int (*cuda_malloc_fn) (void **, size_t);

static double driver_ms = -1;

/* cuInit and the primary context of device 0, as the runtime would make it */
static void *
driver_thread(void *arg)
{
	double		t = gm_now();
	void	   *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	cu_init_fn	init;
	cu_dev_get_fn dev_get;
	cu_ctx_retain_fn retain;
	int			dev;
	void	   *ctx;

	if (drv == NULL)
		return NULL;
	*(void **) &init = dlsym(drv, "cuInit");
	*(void **) &dev_get = dlsym(drv, "cuDeviceGet");
	*(void **) &retain = dlsym(drv, "cuDevicePrimaryCtxRetain");
	if (init && dev_get && retain && init(0) == 0 && dev_get(&dev, 0) == 0)
		(void) retain(&ctx, dev);
	driver_ms = (gm_now() - t) * 1e3;
	return NULL;
}

static double
step(const char *what, double t0)
{
	double		t = gm_now();

	printf("| %-52s | %8.1f |\n", what, (t - t0) * 1e3);
	return t;
}

static int
warm(int k, gm_solver solver)
{
	gm_mf_params p;
	char		err[GM_ERRLEN];
	char		what[96];
	double		t;
	int			rc = GM_OK;

	gm_mf_params_defaults(&p, GM_ALG_ALS_IMPLICIT);
	p.backend = GM_BACKEND_CUDA;
	p.factors = k;
	p.solver = solver;
	for (int i = 1; i <= 2 && rc == GM_OK; i++)
	{
		t = gm_now();
		rc = gm_mf_warmup(&p, err, sizeof(err));
		snprintf(what, sizeof(what), "warm-up %d: als, factors %d, solver %s", i, k,
				 solver == GM_SOLVER_CG ? "cg" : "block");
		step(what, t);
	}
	if (rc != GM_OK)
		fprintf(stderr, "warm-up failed: %s\n", err);
	return rc;
}

int
main(int argc, char **argv)
{
	const char *module = argc > 1 ? argv[1] : "cuda/gpumf_cuda.so";
	const char *libs[] = {"libcuda.so.1", "libcublasLt.so.13", "libcublas.so.13",
		"libcusparse.so.12", "libcusolver.so.12"};
	char		name[128],
				err[GM_ERRLEN];
	double		t,
				t00 = gm_now();
	const char *ml = getenv("CUDA_MODULE_LOADING");

	const char *mode = argc > 2 ? argv[2] : "plain";
	pthread_t	drv_thread;

	printf("CUDA_MODULE_LOADING=%s, mode %s\n\n| step | ms |\n|---|---|\n",
		   ml ? ml : "(unset: lazy)", mode);
	if (strcmp(mode, "parallel") == 0)
		pthread_create(&drv_thread, NULL, driver_thread, NULL);
	t = gm_now();
	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++)
	{
		char		what[96];

		if (dlopen(libs[i], RTLD_NOW | RTLD_GLOBAL) == NULL)
			fprintf(stderr, "%s\n", dlerror());
		snprintf(what, sizeof(what), "dlopen %s", libs[i]);
		t = step(what, t);
	}
	if (strcmp(mode, "parallel") == 0)
	{
		pthread_join(drv_thread, NULL);
		t = step("(the driver thread joined)", t);
		printf("| %-52s | %8.1f |\n", "  driver thread: cuInit + primary context", driver_ms);
	}
	if (gm_cuda_available(module, name, sizeof(name), err, sizeof(err)) != GM_OK)
	{
		fprintf(stderr, "no GPU: %s\n", err);
		return 1;
	}
	t = step("module: dlopen, cuInit, probe", t);
	{
		gm_gpu_caps caps;
		char		fast[128];

		if (gm_cuda_caps(&caps, err, sizeof(err)) != GM_OK)
		{
			fprintf(stderr, "gm_cuda_caps: %s\n", err);
			return 1;
		}
		t = step("device caps (gpumf_device_info's columns)", t);
		gm_gpu_fast_paths(caps.fast, fast, sizeof(fast));
		printf("caps: compute capability %d.%d, kernels compiled for %d.%d, shared memory %d bytes a block, fast paths {%s}, module built for %s\n",
			   caps.cc / 10, caps.cc % 10, caps.code_arch / 10, caps.code_arch % 10,
			   caps.smem_optin, fast, caps.archs);
	}
	if (strcmp(mode, "split") == 0)
	{
		void	   *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
		void	   *bl = dlopen("libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
		cuda_free_fn cfree;
		cuda_malloc_fn cmalloc;
		blas_create_fn bcreate;
		blas_sgemm_fn sgemm;
		void	   *h = NULL;
		float	   *m = NULL;
		const float one = 1.0f,
					zero = 0.0f;

		*(void **) &cfree = rt ? dlsym(rt, "cudaFree") : NULL;
		*(void **) &cmalloc = rt ? dlsym(rt, "cudaMalloc") : NULL;
		*(void **) &bcreate = bl ? dlsym(bl, "cublasCreate_v2") : NULL;
		*(void **) &sgemm = bl ? dlsym(bl, "cublasSgemm_v2") : NULL;
		if (!cfree || !cmalloc || !bcreate || !sgemm)
		{
			fprintf(stderr, "libcudart.so.13 / libcublas.so.13 entry points missing\n");
			return 1;
		}
		t = step("dlopen libcudart.so.13", t);
		cfree(NULL);
		t = step("context: cudaFree(0)", t);
		bcreate(&h);
		t = step("cublasCreate", t);
		cmalloc((void **) &m, sizeof(float) * 3 * 512 * 512);
		sgemm(h, 0, 0, 512, 512, 512, &one, m, 512, m + 512 * 512, 512, &zero,
			  m + 2 * 512 * 512, 512);
		cfree(m);				/* synchronises */
		t = step("first cublasSgemm 512 (and cudaMalloc)", t);
	}
	printf("| %-52s | %8.1f |\n", "total before the first warm-up", (t - t00) * 1e3);
	if (warm(512, GM_SOLVER_CG) != GM_OK || warm(64, GM_SOLVER_CG) != GM_OK ||
		warm(512, GM_SOLVER_BLOCK) != GM_OK)
		return 1;
	printf("| %-52s | %8.1f |\n", "total", (gm_now() - t00) * 1e3);
	return 0;
}
