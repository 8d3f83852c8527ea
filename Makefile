# tttrace build, demo and tests. `make demo` and `make test` install what
SHELL    := /bin/bash
# they need (scripts/deps.sh) on a fresh machine that has Go and gcc.

GO        ?= go
BIN       := bin/tttrace
REPLICA   := build/replica
GOFILES   := $(shell find . -name '*.go' -not -path './build/*')
BPF_SRC   := bpf/tttrace.bpf.c bpf/tttrace.h $(wildcard bpf/headers/*.h bpf/headers/bpf/*.h)
# Replica variants the end-to-end tests run against: NAME:CXX:OPT:DEBUG:STRIP
VARIANTS  := gcc-O2:g++:-O2:: 

.PHONY: all build generate check-generate replica demo test test-unit test-e2e fuzz vet fmt clean

all: build

build: $(BIN)

$(BIN): $(GOFILES) probes/tttrace_x86_bpfel.o go.mod go.sum
	$(GO) build -o $@ ./cmd/tttrace

# Regenerate the BPF objects and their Go bindings (committed).
generate:
	scripts/deps.sh bpf
	cd probes && $(GO) generate ./...

# CI: the committed objects must be what the sources produce.
check-generate: generate
	git diff --exit-code -- probes/

replica: $(REPLICA)/gcc-O2/libtt_metal.so

$(REPLICA)/gcc-O2/libtt_metal.so: $(shell find testdata/replica -type f -not -path '*/build/*')
	scripts/deps.sh build
	$(MAKE) -s -C testdata/replica OUT=$(CURDIR)/$(REPLICA)/gcc-O2 CXX=g++ OPT=-O2

demo: build replica
	scripts/demo.sh $(BIN) $(REPLICA)/gcc-O2

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $(GOFILES))" || { gofmt -l $(GOFILES); echo "gofmt needed"; exit 1; }

test-unit:
	$(GO) test -count=1 ./...

# The end-to-end tests trace the replica with the real BPF path (root).
test-e2e: build replica
	TTTRACE_BIN=$(CURDIR)/$(BIN) TTTRACE_REPLICA=$(CURDIR)/$(REPLICA) \
		$(GO) test -count=1 -v -timeout 20m ./cmd/tttrace/ -run 'E2E' 2>&1 | tee build/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|e2e:' ; exit $${PIPESTATUS[0]}

test: vet build replica
	TTTRACE_BIN=$(CURDIR)/$(BIN) TTTRACE_REPLICA=$(CURDIR)/$(REPLICA) $(GO) test -count=1 -timeout 30m ./...

fuzz:
	$(GO) test ./devices -run '^$$' -fuzz FuzzLedger -fuzztime 60s
	$(GO) test ./events -run '^$$' -fuzz FuzzDecode -fuzztime 30s

# Performance and loss against the floor and the alternatives (root, about
# 10 minutes; not part of make test): one table, see docs/bench.md.
.PHONY: bench
bench:
	scripts/bench.sh

clean:
	rm -rf bin build
