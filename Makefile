# tttrace build, demo and tests. `make demo` and `make test` install what
SHELL    := /bin/bash
# they need (scripts/deps.sh) on a fresh machine that has Go and gcc.

GO        ?= go
BIN       := bin/tttrace
REPLICA   := build/replica
GOFILES   := $(shell find . -name '*.go' -not -path './build/*')
GOIMPORTS := $(GO) tool goimports -local github.com/tttrace/tttrace
BPF_SRC   := $(wildcard bpf/*.c bpf/*.h) $(wildcard bpf/headers/*.h bpf/headers/bpf/*.h)
# Replica variants the end-to-end tests run against (build/replica/NAME), as
# NAME:MAKE_ARGS with the arguments of testdata/replica/Makefile separated by
# commas. cmd/tttrace/e2e_variants_test.go says what each one checks. TTNN_ERA adds the TT-NN
# stand-in (_ttnncpp.so, _ttnn.so) of that era beside libtt_metal.so (testdata/replica/README.md).
REPLICA_VARIANTS := \
	gcc-O2:CXX=g++,OPT=-O2,TTNN_ERA=2026 \
	gcc-O3-dwarf-zstd:CXX=g++,OPT=-O3,DEBUG=-g,COMPRESS_DEBUG=zstd \
	clang-O2-symtab:CXX=clang++,OPT=-O2,STRIP=symtab,TTNN_ERA=2025 \
	clang-O3:CXX=clang++,OPT=-O3,TTNN_ERA=g1 \
	clang-O3-debuglink:CXX=clang++,OPT=-O3,DEBUG=-g,SPLIT_DEBUG=1,COMPRESS_DEBUG=zlib \
	v0-gcc-O2:LAYOUT=V0,CXX=g++,OPT=-O2 \
	v0-clang-O3-dwarf:LAYOUT=V0,CXX=clang++,OPT=-O3,DEBUG=-g \
	v2-gcc-O2-symtab:LAYOUT=V2,CXX=g++,OPT=-O2,STRIP=symtab,TTNN_ERA=2026 \
	v2-clang-O3:LAYOUT=V2,CXX=clang++,OPT=-O3 \
	inline-gcc-O2:INLINE_TRACKER=1,CXX=g++,OPT=-O2 \
	inline-alloc-gcc-O2:INLINE_ALLOCATOR=1,CXX=g++,OPT=-O2 \
	inline-clang-O3:INLINE_TRACKER=1,INLINE_LIFECYCLE=1,CXX=clang++,OPT=-O3 \
	inline-gcc-O3-symtab:INLINE_TRACKER=1,INLINE_LIFECYCLE=1,CXX=g++,OPT=-O3,STRIP=symtab \
	unknown-gcc-O2:LAYOUT=UNKNOWN,CXX=g++,OPT=-O2 \
	unknown-gcc-O2-dwarf:LAYOUT=UNKNOWN,CXX=g++,OPT=-O2,DEBUG=-g \
	v2-u8-gcc-O2:LAYOUT=V2,TYPE_U8=1,CXX=g++,OPT=-O2 \
	u8-gcc-O2-dwarf:TYPE_U8=1,CXX=g++,OPT=-O2,DEBUG=-g \
	u8-gcc-O2:TYPE_U8=1,CXX=g++,OPT=-O2 \
	v2-pimpl2-gcc-O2:LAYOUT=V2,PIMPL2=1,CORE_NS=1,CXX=g++,OPT=-O2 \
	cet-gcc-O2:CXX=g++,OPT=-O2,CXXFLAGS=-fcf-protection=full \
	inline-cet-clang-O3:INLINE_TRACKER=1,INLINE_LIFECYCLE=1,CXX=clang++,OPT=-O3,CXXFLAGS=-fcf-protection=full
comma     := ,
# Compile jobs inside one variant's build.
JOBS      ?= $(shell nproc)
REPLICA_SRC := $(shell find testdata/replica -type f -not -path '*/build/*')
variant_name = $(firstword $(subst :, ,$(1)))
variant_args = $(subst $(comma), ,$(word 2,$(subst :, ,$(1))))

.PHONY: all build generate check-generate replica demo test test-unit test-e2e fuzz vet fmt clean

all: build

build: $(BIN)

$(BIN): $(GOFILES) probes/tttrace_x86_bpfel.o go.mod go.sum
	$(GO) build -o $@ ./cmd/tttrace

# Regenerate the BPF objects and their Go bindings (committed).
generate:
	scripts/deps.sh bpf
	cd probes && $(GO) generate ./...
	cd events && $(GO) generate ./...
	cd ttmetal && $(GO) generate ./...
	cd pyframes && $(GO) generate .
	cd pyframes/internal/pyprobe && $(GO) generate ./...
	cd stacks/internal/stacktest && $(GO) generate ./...

# CI: the committed objects must be what the sources produce.
check-generate: generate
	git diff --exit-code -- probes/ events/ ttmetal/ pyframes/ stacks/

# Every variant, in $(REPLICA)/NAME (make REPLICA=DIR builds elsewhere).
replica: $(foreach v,$(REPLICA_VARIANTS),$(REPLICA)/$(call variant_name,$(v))/libtt_metal.so)

define replica_variant
$(REPLICA)/$(call variant_name,$(1))/libtt_metal.so: $(REPLICA_SRC)
	scripts/deps.sh build
	$(MAKE) -s -j$(JOBS) -C testdata/replica OUT=$(abspath $(REPLICA))/$(call variant_name,$(1)) $(call variant_args,$(1))
endef
$(foreach v,$(REPLICA_VARIANTS),$(eval $(call replica_variant,$(v))))

# The OpenTelemetry Collector the --otlp tests send to (docs/otlp.md): a Go
# module of its own (internal/otelcol), so tttrace's go.mod never carries it.
# Built once per clone (about 170 s of CPU with an empty Go build cache, and
# 117 MB of modules with an empty module cache), then kept in build/.
OTELCOL := build/otelcol/otelcol
.PHONY: otelcol
otelcol: $(OTELCOL)
$(OTELCOL): internal/otelcol/main.go internal/otelcol/go.mod internal/otelcol/go.sum
	cd internal/otelcol && $(GO) build -o $(CURDIR)/$@ .

# The demo needs one replica build, not every variant.
demo: build $(REPLICA)/gcc-O2/libtt_metal.so
	scripts/demo.sh $(BIN) $(REPLICA)/gcc-O2

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $(GOFILES))" || { gofmt -l $(GOFILES); echo "gofmt needed"; exit 1; }
	@# Imports in three groups: the standard library, others, this module.
	@test -z "$$($(GOIMPORTS) -l $(GOFILES))" || { $(GOIMPORTS) -l $(GOFILES); echo "$(GOIMPORTS) -w needed"; exit 1; }
	@# docs/architecture.md's package rows are the packages of go list.
	@scripts/checkarch.sh

# Everything but the privileged end-to-end tests of cmd/tttrace (no root,
# no replica needed).
test-unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v '/cmd/tttrace$$')

# The end-to-end tests trace the replica with the real BPF path (root).
test-e2e: build replica $(OTELCOL)
	scripts/deps.sh test
	TTTRACE_BIN=$(CURDIR)/$(BIN) TTTRACE_REPLICA=$(CURDIR)/$(REPLICA) TTTRACE_OTELCOL=$(CURDIR)/$(OTELCOL) \
		$(GO) test -count=1 -v -timeout 20m ./cmd/tttrace/ -run 'E2E' 2>&1 | tee build/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|e2e:' ; exit $${PIPESTATUS[0]}

test: vet build replica $(OTELCOL)
	scripts/deps.sh test
	set -o pipefail; python3 testdata/replica/selfcheck.py --out $(CURDIR)/$(REPLICA)/gcc-O2 --no-build | grep -v '^ok '
	TTTRACE_BIN=$(CURDIR)/$(BIN) TTTRACE_REPLICA=$(CURDIR)/$(REPLICA) TTTRACE_OTELCOL=$(CURDIR)/$(OTELCOL) $(GO) test -count=1 -timeout 30m ./...

fuzz:
	$(GO) test ./devices -run '^$$' -fuzz FuzzLedger -fuzztime 60s
	$(GO) test ./events -run '^$$' -fuzz FuzzDecode -fuzztime 30s
	$(GO) test ./pyframes -run '^$$' -fuzz FuzzDecode -fuzztime 30s
	$(GO) test ./elfx -run '^$$' -fuzz '^FuzzFile$$' -fuzztime 30s
	$(GO) test ./elfx -run '^$$' -fuzz '^FuzzNotes$$' -fuzztime 15s
	$(GO) test ./elfx -run '^$$' -fuzz '^FuzzCFI$$' -fuzztime 15s
	$(GO) test ./ttmetal -run '^$$' -fuzz '^FuzzLibrary$$' -fuzztime 30s
	$(GO) test ./procfs -run '^$$' -fuzz '^FuzzParseMaps$$' -fuzztime 15s
	$(GO) test ./procfs -run '^$$' -fuzz '^FuzzParseCgroups$$' -fuzztime 15s
	$(GO) test ./kube -run '^$$' -fuzz '^FuzzParsePath$$' -fuzztime 15s
	$(GO) test ./alloc -run '^$$' -fuzz '^FuzzModel$$' -fuzztime 15s
	$(GO) test ./alloc -run '^$$' -fuzz '^FuzzFreeList$$' -fuzztime 15s

# Performance and loss against the floor and the alternatives (root, about
# 10 minutes; not part of make test): one table, see docs/bench.md.
.PHONY: bench
bench:
	scripts/bench.sh

clean:
	rm -rf bin build
