# Flags for programs that link the pure-C core (src/core) directly: the unit
# tests and the CPU benchmark.  Set CORE (the path to src/core) first.
CC      ?= gcc
CFLAGS  += -fopenmp -std=gnu11 -I$(CORE) -I/usr/include/x86_64-linux-gnu
HAVE_OPENBLAS := $(and $(wildcard /usr/lib/x86_64-linux-gnu/libopenblas.so),$(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h))
CFLAGS  += $(if $(HAVE_OPENBLAS),,-DGM_NO_CBLAS)
LDLIBS  := $(if $(HAVE_OPENBLAS),-lopenblas) -lm -ldl -lgomp
CORE_SRCS := $(wildcard $(CORE)/*.c)
CORE_HDRS := $(wildcard $(CORE)/*.h)
