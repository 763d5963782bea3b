# gridlink: `make demo` and `make test` do everything on a fresh machine
# (Debian, root): they install what they need first.
SHELL    := /bin/bash
GO       ?= go
BIN      := bin
FUZZTIME ?= 60s
# Debian packages the lab and the tests use; `make deps` installs those missing.
# miniupnpd-nftables is the IGD of igd=on lab sites: the daemon alone (the
# nftables build, like the lab's NATs), not the miniupnpd package, whose
# system service would start in the root namespace.
DEBS     := iproute2 nftables iputils-ping iperf3 socat openssh-server openssh-client miniupnpd-nftables curl python3-socks python3-socksio
# internal/lab/cluster's MPI job and file system (it also installs them on
# demand, cluster.Install, for a plain go test).
DEBS     += openmpi-bin python3-mpi4py sshfs fuse3
# ... MPICH's hydra and mpicc, and a Slurm cluster (TestClusterExec); their
# daemons are started by the test inside lab namespaces, never by the
# packages (policy-rc.d refuses while deps installs).
DEBS     += mpich libmpich-dev slurmctld slurmd slurm-client munge

.PHONY: all build deps test unit lab-test demo bench fuzz down clean scale
all: build
# prometheus brings promtool, which checks the /metrics output
# (TestMetricsScrapedDuringTraffic); its server is not used.
DEBS     += prometheus
# chromium (headless, driven by chromedp) is the browser of the dashboard's
# lab test (TestGrid6Dashboard); fonts for its screenshots.
DEBS     += chromium fonts-dejavu-core
# The Globus tools of pki's interop tests (TestGridProxyInitAccepted,
# TestGridFTPAcceptsGridlinkProxy): grid-proxy-init and grid-proxy-info, a
# GSI GridFTP server run on loopback by the test (never as a service),
# globus-url-copy; openssl for the trust directory's hashed names.
DEBS     += globus-proxy-utils globus-gridftp-server-progs globus-gass-copy-progs openssl

deps:
	@missing=""; for p in $(DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; rc=/usr/sbin/policy-rc.d; made=; \
	  [ -e $$rc ] || { printf '#!/bin/sh\nexit 101\n' >$$rc && chmod 755 $$rc && made=1; }; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; st=$$?; \
	  [ -z "$$made" ] || rm -f $$rc; exit $$st; \
	fi

build:
	$(GO) build -o $(BIN)/gridlink ./cmd/gridlink
	$(GO) build -o $(BIN)/gridlab ./cmd/gridlab

# Everything: vet, unit tests, fuzz seed corpora and lab integration tests,
# with the race detector. Lab tests need root and fail (not skip) under CI=true.
test: deps build
	$(GO) vet ./...
	@# the gridlink binary builds elsewhere too (the lab is Linux only)
	GOOS=darwin $(GO) build -o /dev/null ./cmd/gridlink
	GOOS=windows $(GO) build -o /dev/null ./cmd/gridlink
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(BIN)/gridlab down >/dev/null
	@# a failed run ends with what failed and why (.ci/failures), however long its log
	GRIDLINK_BIN=$(CURDIR)/$(BIN)/gridlink $(GO) test -race -count=1 -timeout 14m ./... 2>&1 | tee $(BIN)/test.log; \
	status=$${PIPESTATUS[0]}; if [ $$status -ne 0 ]; then echo "=== what failed (from $(BIN)/test.log)"; .ci/failures $(BIN)/test.log; fi; exit $$status

# The main job on built-in defaults: bring up grid6 and print its
# connectivity matrix, then tear it down.
demo: deps build
	$(BIN)/gridlab matrix grid6

# Speed and memory figures for BENCHMARKS.md (needs root; run on an idle
# machine): Go benchmarks (link emulator, hub), then the lab scenarios.
bench: deps build
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./internal/lab/wan/ ./hub/hubserver/ ./link/
	$(GO) test -run '^$$' -bench 'MetricsCost|Scrape' -benchtime 5x -count 4 .
	bench/lab.sh
	bench/links.sh
	bench/apps.sh
	bench/xfer.sh
	bench/security.sh
	bench/flood.sh
	bench/vip.sh
	bench/routed.sh
	bench/exec.sh
	bench/setup.sh

# Scale (issue 23; not part of test): an overlay of HUBS hubs in one
# process (in-memory network, latencies of sites up to 20 ms apart) and
# NODES nodes in another, attached over loopback TCP; prints a table of
# route convergence when a hub dies and returns, control traffic idle and
# during churn, lookup and setup times, hub memory per node and circuit.
# MAXLINKS is every hub's Config.MaxLinks (0: the product's default, 6;
# -1: a full mesh, the default before 2026-11-26; 100 hubs in a full
# mesh sent about 200 MB/s of whole tables in all when tables were
# periodic); INTERVAL the gossip interval (the product's default is 1s).
# Smaller, full mesh:
# make scale HUBS=20 NODES=1000 IDLE=5s MAXLINKS=-1 INTERVAL=1s.
HUBS     ?= 100
NODES    ?= 10000
IDLE     ?= 10s
MAXLINKS ?= 8
INTERVAL ?= 5s
scale:
	set -o pipefail; GRIDLINK_SCALE=1 SCALE_HUBS=$(HUBS) SCALE_NODES=$(NODES) SCALE_IDLE=$(IDLE) SCALE_CHURN_FOR=$(IDLE) SCALE_MAXLINKS=$(MAXLINKS) SCALE_INTERVAL=$(INTERVAL) \
	  $(GO) test -run '^TestScale$$' -count 1 -timeout 60m -v ./hub/hubserver/ | grep --line-buffered -v '^=== RUN\|^--- PASS\|^PASS$$\|^ok '

# Longer fuzzing of every fuzz target, FUZZTIME each.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# Soak (issue 23; not part of test, needs root): grid6 with its overlay
# under steady traffic (cp checked byte for byte, ping loops, an ssh
# session through gridlink nc, virtual-network streams) while nodes
# leave and join, hubs die (-9) and return, wide-area paths flap, lose
# bursts and partition; reports bytes corrupted or lost, every failure
# with its reason and the chaos it fell in, and the slopes of each
# process's RSS, goroutines and open files (BENCHMARKS.md "Soak").
# Shorter: make soak SOAK=10m; the same chaos: SOAK_SEED=N; Ctrl-C ends
# it early with its report.
SOAK        ?= 1h
SOAK_SEED   ?=
SOAK_REPORT ?= $(CURDIR)/soak-report.md
.PHONY: soak
soak: deps build
	GRIDLINK_SOAK=$(SOAK) GRIDLINK_SOAK_SEED=$(SOAK_SEED) GRIDLINK_SOAK_REPORT=$(SOAK_REPORT) GRIDLINK_BIN=$(CURDIR)/$(BIN)/gridlink \
	  $(GO) test -run '^TestSoak$$' -count 1 -timeout 0 -v ./internal/lab/

down:
	-$(BIN)/gridlab down

clean: down
	rm -rf $(BIN)
