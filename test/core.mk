# Flags for programs that link the pure-C core (src/core) directly: the unit
# tests and the CPU benchmark.  Set CORE (the path to src/core) first.
CC      ?= gcc
# the core's folders by product line (ARCHITECTURE.md)
CORE_DIRS := $(CORE)/common $(CORE)/train $(CORE)/serve $(CORE)/linalg
CFLAGS  += -fopenmp -std=gnu11 $(CORE_DIRS:%=-I%) -I/usr/include/x86_64-linux-gnu
HAVE_OPENBLAS := $(and $(wildcard /usr/lib/x86_64-linux-gnu/libopenblas.so),$(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h))
CFLAGS  += $(if $(HAVE_OPENBLAS),,-DGM_NO_CBLAS)
LDLIBS  := $(if $(HAVE_OPENBLAS),-lopenblas) -lm -ldl -lgomp
CORE_SRCS := $(wildcard $(CORE_DIRS:%=%/*.c))
CORE_HDRS := $(wildcard $(CORE_DIRS:%=%/*.h))
