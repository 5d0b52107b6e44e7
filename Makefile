# gpumf: PostgreSQL extension (PGXS).  CUDA module built when nvcc exists.
EXTENSION = gpumf
MODULE_big = gpumf
DATA = src/gpumf--0.1.sql src/gpumf--0.1--0.2.sql src/gpumf--0.2--0.3.sql src/gpumf--0.3--0.4.sql src/gpumf--0.4--0.5.sql
# objects by layer (src/pg: PostgreSQL glue, src/core: pure C) and product
# line (common, model, train: training recommenders, serve: serving and
# evaluating them, linalg: sparse solves and least squares); ARCHITECTURE.md
PG_COMMON   = guc extension guard checks device source source_keys source_rows source_exec source_scan source_worker
PG_MODEL    = model_catalog model_store store_direct model_history wal_ahead
PG_TRAIN    = train train_params train_device gpu_memory train_service autotune tune synth
PG_SERVE    = model_cache served_tables shared_models warm_worker serving fold_in recommend similar predict model_load batch evaluate split versions vectors
PG_LINALG   = linalg_device solve ols
CORE_COMMON = util csr keymap gram backend mf_params populate
CORE_TRAIN  = algorithms mf_loop als_implicit als_explicit ccd graph_filter tune auto rank_eval synth synth_ratings
CORE_SERVE  = topk serve foldin score metrics
CORE_LINALG = spmat spmv pcg ols ols_finish student_t linalg_backend
OBJS = src/pg/gpumf.o $(PG_COMMON:%=src/pg/common/%.o) $(PG_MODEL:%=src/pg/model/%.o) \
       $(PG_TRAIN:%=src/pg/train/%.o) $(PG_SERVE:%=src/pg/serve/%.o) \
       $(PG_LINALG:%=src/pg/linalg/%.o) \
       $(CORE_COMMON:%=src/core/common/%.o) $(CORE_TRAIN:%=src/core/train/%.o) \
       $(CORE_SERVE:%=src/core/serve/%.o) $(CORE_LINALG:%=src/core/linalg/%.o)

REGRESS = setup train_basic keys bad_input recommend privileges hardening explicit precision device linalg sqlpath upgrade \
          serving foldin parallel batch evaluate split history ials vectors autotune graph_filter store
REGRESS_OPTS = --dbname=gpumf_regression

PG_CONFIG ?= pg_config
# OpenBLAS for Y^T Y and serving (sgemv) when present; plain C loops otherwise
HAVE_OPENBLAS := $(and $(wildcard /usr/lib/x86_64-linux-gnu/libopenblas.so),$(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h))
LINES = common train serve linalg
PG_CPPFLAGS = $(LINES:%=-I$(srcdir)/src/core/%) $(addprefix -I$(srcdir)/src/pg/,$(LINES) model) -fopenmp -O3 $(if $(HAVE_OPENBLAS),,-DGM_NO_CBLAS)
SHLIB_LINK = -fopenmp $(if $(HAVE_OPENBLAS),-lopenblas) -ldl -lm

NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

PGXS := $(shell $(PG_CONFIG) --pgxs)

# JIT bitcode needs the clang PostgreSQL was built with (CLANG in its
# Makefile.global: clang-14 for Debian 12's 15; none for the wheels, built
# without LLVM) and that clang's omp.h (libomp-N-dev), since the files that
# use OpenMP are compiled with -fopenmp; skip the bitcode where either is
# absent (the functions then run the same, without JIT inlining)
PG_CLANG := $(shell sed -n 's/^CLANG *= *//p' $(dir $(PGXS))../Makefile.global 2>/dev/null)
ifeq ($(and $(PG_CLANG),$(shell $(PG_CLANG) -fopenmp -include omp.h -E -x c /dev/null >/dev/null 2>&1 && echo yes)),)
override with_llvm = no
endif

include $(PGXS)

# A PostgreSQL built elsewhere with another compiler (the PyPI wheels of 16 and
# 18: gcc 14) can hand PGXS warning options that this gcc rejects as errors
# (18.6's -Wmissing-variable-declarations is unknown to Debian 12's gcc 12):
# ask the compiler once which of CFLAGS' -W options it does not know, drop
# those and keep the rest.
PG_UNKNOWN_WFLAGS := $(shell LC_ALL=C $(CC) $(filter -W%,$(CFLAGS)) -E -x c /dev/null -o /dev/null 2>&1 | \
	sed -n "s/.*unrecognized command-line option '\(-W[^']*\)'.*/\1/p")
ifneq ($(PG_UNKNOWN_WFLAGS),)
override CFLAGS := $(filter-out $(PG_UNKNOWN_WFLAGS),$(CFLAGS))
endif

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

# objects compiled against one PostgreSQL (its headers and flags) are not for
# another: .pg-build names the one they were compiled for, and changes (making
# every object out of date) when PG_CONFIG points at another installation
PG_BUILD_ID := $(PG_CONFIG) $(VERSION)
.pg-build: FORCE
	@echo '$(PG_BUILD_ID)' | cmp -s - $@ || echo '$(PG_BUILD_ID)' >$@
$(OBJS) $(OBJS:.o=.bc): .pg-build
EXTRA_CLEAN += .pg-build
.PHONY: FORCE
FORCE:

# every object of the PostgreSQL layer sees its line's header (which
# includes the lines' below it) and the core's
$(filter src/pg/%.o,$(OBJS)): $(wildcard src/pg/*/gpumf_*.h) src/pg/common/pg_compat.h \
		src/core/common/gm_core.h src/core/common/gm_algo.h src/core/common/gm_errors.h

.PHONY: unit test
unit:
	$(MAKE) -C test/unit check
test:
	bash test/run_all.sh
