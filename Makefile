# gpumf: PostgreSQL extension (PGXS).  CUDA module built when nvcc exists.
EXTENSION = gpumf
MODULE_big = gpumf
DATA = src/gpumf--0.1.sql src/gpumf--0.1--0.2.sql src/gpumf--0.2--0.3.sql
OBJS = src/pg/gpumf.o src/pg/guard.o src/pg/checks.o src/pg/device.o src/pg/source.o \
       src/pg/model_catalog.o src/pg/model_store.o src/pg/model_cache.o \
       src/pg/train.o src/pg/train_service.o src/pg/tune.o src/pg/recommend.o src/pg/predict.o src/pg/similar.o src/pg/serving.o src/pg/synth.o \
       src/pg/solve.o src/pg/ols.o \
       src/core/util.o src/core/csr.o src/core/backend.o src/core/mf_loop.o \
       src/core/als_implicit.o src/core/topk.o src/core/keymap.o \
       src/core/synth.o src/core/serve.o src/core/foldin.o \
       src/core/ccd.o src/core/als_explicit.o src/core/synth_ratings.o \
       src/core/spmat.o src/core/spmv.o src/core/pcg.o src/core/ols.o src/core/linalg_backend.o \
       src/pg/model_load.o src/pg/batch.o src/pg/evaluate.o src/pg/split.o src/pg/model_history.o \
       src/core/score.o src/core/metrics.o src/core/rank_eval.o src/core/tune.o

REGRESS = setup train_basic keys bad_input recommend privileges hardening explicit precision device linalg sqlpath upgrade \
          serving foldin parallel batch evaluate split history ials
REGRESS_OPTS = --dbname=gpumf_regression

PG_CONFIG ?= pg_config
# OpenBLAS for Y^T Y and serving (sgemv) when present; plain C loops otherwise
HAVE_OPENBLAS := $(and $(wildcard /usr/lib/x86_64-linux-gnu/libopenblas.so),$(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h))
PG_CPPFLAGS = -I$(srcdir)/src/core -I$(srcdir)/src/pg -fopenmp -O3 $(if $(HAVE_OPENBLAS),,-DGM_NO_CBLAS)
SHLIB_LINK = -fopenmp $(if $(HAVE_OPENBLAS),-lopenblas) -ldl -lm

NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

# JIT bitcode needs the clang PostgreSQL was built with; skip it where absent
ifeq ($(shell command -v clang-14 2>/dev/null),)
override with_llvm = no
endif

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# the CUDA module (not JIT-able, so not in OBJS)
# (GPUMF_CUDA_ARCHS / GPUMF_CUDA_PTX pick its GPU architectures: cuda/Makefile;
# cuda/Makefile decides what is out of date, the flags included)
ifeq ($(NVCC),)
all: ; @echo "nvcc not found: CPU-only build"
else
all: cuda/gpumf_cuda.so
cuda/gpumf_cuda.so: FORCE
	$(MAKE) -C cuda NVCC=$(NVCC) gpumf_cuda.so
FORCE:
.PHONY: FORCE
install: install-cuda
install-cuda: cuda/gpumf_cuda.so
	$(INSTALL_SHLIB) cuda/gpumf_cuda.so '$(DESTDIR)$(pkglibdir)/gpumf_cuda.so'
endif

# every object of the PostgreSQL layer sees its shared header and the core's
$(filter src/pg/%.o,$(OBJS)): src/pg/gpumf_pg.h src/core/gm_core.h src/core/gm_algo.h src/core/gm_errors.h

.PHONY: unit test
unit:
	$(MAKE) -C test/unit check
test:
	bash test/run_all.sh
