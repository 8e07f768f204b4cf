# vram: the two set-up commands are `make run` and `make test`.
BUILD     ?= build
ASAN      ?= build-asan
TSAN      ?= build-tsan
JOBS      ?= $(shell nproc)
# Recursive makes (cmake --build runs make in build/) would print two
# "Entering/Leaving directory" lines each; what a newcomer reads is the output.
MAKEFLAGS += --no-print-directory
CMAKE_FLAGS ?= -DVRAM_WERROR=ON

# Debian packages the build and the tests need (installed by `make deps`).
DEPS := cmake make gcc pkg-config libcmocka-dev libjansson-dev zlib1g-dev \
        libcurl4-openssl-dev libsqlite3-dev libncurses-dev libyaml-dev sqlite3 \
        procps python3 python3-venv curl \
        python3-pytest python3-setuptools python3-pip \
        libjs-dygraphs prometheus prometheus-alertmanager tmux chromium chromium-driver python3-selenium
# Installing and its test (packaging/, docs/install.md); Slurm's SPANK plugin
# and its one-node cluster test (contrib/slurm/, docs/slurm.md).
DEPS += scdoc man-db systemd bash-completion libslurm-dev slurmctld slurmd munge
# The multi-node test cluster (contrib/slurm/vram-testcluster): iproute2 and
# util-linux for the namespaces, socat to reach each node's loopback vramd.
DEPS += iproute2 util-linux socat

# The project's Python environment: a venv on the machine's Python with the
# PyPI packages of python/requirements-dev.txt (torch on the CPU, transformers,
# peft, accelerate, lightning, pytest, schemathesis, NVIDIA's nvml.h). The
# Python tests and the estimator's checks against transformers run in it.
VENV        ?= $(CURDIR)/.venv
VENV_PYTHON ?= /usr/bin/python3
VENV_REQS   := python/requirements-dev.txt
CMAKE_FLAGS += -DVRAM_PYTHON=$(VENV)/bin/python

# `make install PREFIX=/usr DESTDIR=/tmp/pkgroot`; `make uninstall` removes
# what the last install listed in $(BUILD)/install_manifest.txt.
PREFIX    ?= /usr/local
DESTDIR   ?=

.PHONY: all build deps venv test test-unit asan tsan fuzz run bench format clean
.PHONY: install uninstall deb-deps

all: build

deps: deb-deps venv

deb-deps:
	@missing=$$(for p in $(DEPS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "deps: all installed"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "deps: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else \
	  echo "deps: missing packages; run as root:"; \
	  echo "  apt-get install -y $$missing"; exit 1; \
	fi

# Re-made when the requirements change; pip reuses its cache, so a warm
# machine installs nothing twice.
venv: $(VENV)/.installed
$(VENV)/.installed: $(VENV_REQS) | deb-deps
	@[ -x $(VENV)/bin/python ] || $(VENV_PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --progress-bar off -r $(VENV_REQS)
	@touch $@

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The ASan+UBSan build runs the unit tests; part of `make test`.
asan:
	cmake -S . -B $(ASAN) $(CMAKE_FLAGS) -DVRAM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(ASAN) -j $(JOBS)
	cd $(ASAN) && ASAN_OPTIONS=detect_leaks=1 ctest -L unit --output-on-failure -j $(JOBS)

# ThreadSanitizer build of the tests labelled "threads"; part of `make test`.
tsan:
	cmake -S . -B $(TSAN) $(CMAKE_FLAGS) -DVRAM_TSAN=ON -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(TSAN) -j $(JOBS)
	cd $(TSAN) && ctest -L threads --output-on-failure

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) asan
	$(MAKE) tsan

# Coverage-guided libFuzzer run of every parser (needs clang; optional, not in
# DEPS). FUZZ_SECONDS per target; docs/fuzzing.md. `make test` runs the smoke.
FUZZ_BUILD   ?= build-libfuzzer
FUZZ_SECONDS ?= 60
FUZZ_STRICT  ?= OFF
fuzz:
	JOBS=$(JOBS) FUZZ_STRICT=$(FUZZ_STRICT) bash tests/fuzz/libfuzzer.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

install: $(BUILD)/CMakeCache.txt
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX)
	cmake --build $(BUILD) -j $(JOBS)
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD)
	@if [ -z "$(DESTDIR)" ]; then echo "installed; to run the system vramd: systemd-sysusers;" \
	  "systemd-tmpfiles --create vram.conf; systemctl daemon-reload; systemctl enable --now vramd" \
	  "(docs/install.md)"; fi

uninstall:
	cmake --build $(BUILD) --target uninstall

# The build's progress goes to a log: the demo's output is what to read.
run: deps $(BUILD)/CMakeCache.txt
	@echo "run: building in $(BUILD)/ (log: $(BUILD)/build.log)"
	@cmake --build $(BUILD) -j $(JOBS) >$(BUILD)/build.log 2>&1 || { tail -n 40 $(BUILD)/build.log; exit 1; }
	@bash scripts/run-demo.sh $(BUILD)

bench: build
	cmake --build $(BUILD) --target bench -j $(JOBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN) $(TSAN)
