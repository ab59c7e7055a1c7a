# millwright: the two commands a newcomer needs are `make run` and `make test`.
SHELL   := /usr/bin/env bash
BIN     := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)
PKGS    := ./pkg/... ./services/policy/... ./services/roleset/... ./services/billing/... ./gateway/... ./deploy/... ./cli/...
CMDS    := ./services/policy/cmd/policy ./services/roleset/cmd/roleset ./services/billing/cmd/billing ./gateway/cmd/gateway ./gateway/cmd/demo ./cli/cmd/millwright
# -race roughly doubles CPU time; on 2 cores the suite stays well under the 15 minute budget.
TESTFLAGS ?= -race -count=1 -timeout=12m

.PHONY: run test generate check-generated lint breaking build bench bench-jobpath tools e2e fuzz clean chaos chaos-net chaos-policy chaos-pg soak

run: build ## start Postgres (unless DATABASE_URL is set), the three services and the gateway
	scripts/run.sh

test: ## every test: unit, real-Postgres integration, gateway, README (go vet runs in make lint)
	go test $(TESTFLAGS) $(PKGS)

e2e: ## the end-to-end tests alone: the local stack, the demo loaded twice, the README walkthrough
	go test -count=1 -timeout=10m ./gateway/e2e/...

build: ## static binaries into ./bin
	CGO_ENABLED=0 go build -o $(BIN)/ $(CMDS)

tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/golangci-lint ## pinned buf, protoc plugins and golangci-lint into ./bin

$(BIN)/buf: scripts/tools/buf/go.mod scripts/tools/buf/go.sum
	cd scripts/tools/buf && GOWORK=off GOBIN=$(BIN) go install tool

$(BIN)/protoc-gen-go: scripts/tools/protoc/go.mod scripts/tools/protoc/go.sum
	cd scripts/tools/protoc && GOWORK=off GOBIN=$(BIN) go install tool

$(BIN)/golangci-lint: scripts/tools/golangci-lint/go.mod scripts/tools/golangci-lint/go.sum
	cd scripts/tools/golangci-lint && GOWORK=off GOBIN=$(BIN) go install tool

# Every module of the workspace (go.work).
MODULES := pkg services/policy services/roleset services/billing gateway deploy cli

generate: tools ## regenerate pkg/gen, gateway/openapi and pkg/apidesc (documented descriptors) from proto/
	buf format -w --path proto/millwright
	buf generate
	buf build -o pkg/apidesc/millwright.binpb --path proto/millwright

check-generated: generate ## fail when the committed generated code is stale
	git diff --exit-code -- pkg/gen pkg/apidesc gateway/openapi proto
	@test -z "$$(git status --porcelain -- pkg/gen pkg/apidesc gateway/openapi)" || { git status --porcelain -- pkg/gen pkg/apidesc gateway/openapi; exit 1; }

lint: tools ## buf lint + format, golangci-lint (go vet, gofmt, gci, errorlint, exhaustive, ...: .golangci.yml), go mod tidy
	buf lint
	buf format -d --exit-code --path proto/millwright
	golangci-lint run $(PKGS)
	@for m in $(MODULES); do (cd $$m && go mod tidy -diff) || { echo "go mod tidy needed in $$m"; exit 1; }; done

# Against main by default; in a clone of main itself, compare with the previous commit:
# make breaking BREAKING_AGAINST='.git#ref=HEAD~1'
BREAKING_AGAINST ?= .git\#branch=main
breaking: tools ## buf breaking (FILE rules) against BREAKING_AGAINST
	buf breaking --against '$(BREAKING_AGAINST)'

bench: ## benchmarks behind docs/benchmarks.md
	go test -run='^$$' -bench=. -benchmem -count=1 $(PKGS)

fuzz: ## a short fuzz pass over every parser of untrusted input
	scripts/fuzz.sh 30s

clean:
	rm -rf $(BIN)

# JOBPATH_DATABASE_URL: a durable server to measure on (default: the test cluster, fsync off).
bench-jobpath: ## the job-path benchmark of docs/benchmarks.md (record + finish vs bare insert + update)
	JOBPATH_BENCH=1 go test -count=1 -timeout=30m -run '^TestJobPathBench$$' -v ./services/policy/internal/api/

# docs/reliability.md, "Target cluster faults": make test runs one round of each fault.
CHAOS_NET_ROUNDS ?= 25
chaos-net: ## target cluster faults through pkg/faultnet (latency, stall, reset, partition), CHAOS_NET_ROUNDS rounds
	MILLWRIGHT_CHAOS_NET_ROUNDS=$(CHAOS_NET_ROUNDS) go test -count=1 -timeout=30m -run '^TestTargetClusterFaults$$' -v ./services/roleset/internal/itest/ | grep -E 'FIGURES|^(---|ok|FAIL|PASS)'

# docs/reliability.md, "Policy down": make test runs one round.
CHAOS_POLICY_ROUNDS ?= 10
chaos-policy: ## policy killed and restarted under roleset and billing, CHAOS_POLICY_ROUNDS rounds
	MILLWRIGHT_CHAOS_POLICY_ROUNDS=$(CHAOS_POLICY_ROUNDS) go test -count=1 -timeout=30m -run '^TestPolicyDown$$' -v ./services/roleset/internal/itest/ ./services/billing/internal/app/ | grep -E 'FIGURES|^(---|ok|FAIL|PASS)'

# docs/reliability.md, "Process kills at named failpoints": make test runs 50 roleset cycles
# and no policy cycle.
CHAOS_CYCLES ?= 1000
CHAOS_POLICY_KILLS ?= 50
chaos: ## fault builds SIGKILLed at random failpoints and restarted, invariants after each: CHAOS_CYCLES of roleset, CHAOS_POLICY_KILLS of policy (under billing)
	MILLWRIGHT_CHAOS_CYCLES=$(CHAOS_CYCLES) go test -count=1 -timeout=180m -run '^TestChaosKills$$' -v ./services/roleset/internal/itest/ | grep -E 'FIGURES|^(---|ok|FAIL|PASS)|Error|chaos_test'
	MILLWRIGHT_CHAOS_POLICY_KILLS=$(CHAOS_POLICY_KILLS) go test -count=1 -timeout=60m -run '^TestChaosPolicyKills$$' -v ./services/billing/internal/app/ | grep -E 'FIGURES|^(---|ok|FAIL|PASS)|Error|chaos_test'

# docs/reliability.md, "Postgres restarted under load": make test runs one restart of each mode
# with 16 callers; this runs CHAOS_PG_ROUNDS of each (at most 4: one revoke victim a round) with 64.
CHAOS_PG_ROUNDS ?= 4
chaos-pg: ## Postgres stopped fast / immediate and started under 3 replicas and 64 resolvers, CHAOS_PG_ROUNDS rounds of each
	MILLWRIGHT_CHAOS_PG_ROUNDS=$(CHAOS_PG_ROUNDS) go test -count=1 -timeout=30m -run '^TestPostgresRestart$$' -v ./gateway/e2e/ | grep -E 'FIGURES|round|^(---|ok|FAIL|PASS)'

# docs/reliability.md, "Load with no fault": make test runs 15 s with 16 callers; this runs
# SOAK_DURATION with 64. No go test timeout: the test bounds itself (SOAK_DURATION + 10 min).
# pipefail: grep would otherwise hide a failed run.
SOAK_DURATION ?= 10m
soak: ## 3 replicas of each service, 64 callers of mixed traffic (resolves, builder and seat checks, builder flips, role disables) for SOAK_DURATION: errors, wrong decisions, p50/p99 per RPC, memory and goroutines
	set -o pipefail; MILLWRIGHT_SOAK_DURATION=$(SOAK_DURATION) go test -count=1 -timeout=0 -run '^TestSoak$$' -v ./gateway/e2e/ | grep -E 'FIGURES|^(---|ok|FAIL|PASS)|Error|soak_test'
