# Foldtable. `make run` and `make test` work on a fresh Debian machine with Swift installed.
SHELL := /bin/bash
SWIFT ?= swift
PORT ?= 8080
VENV := .venv
PY := $(VENV)/bin/python

# System packages: to build and run, and what the test suites use as real peers.
# libhiredis-dev: FoldtableRedis (the Redis adapter) builds with the package; redis-server is the
# real Redis its tests start on a loopback port (redis-tools: redis-cli makes and reshards the
# Redis Cluster tests' cluster). python3-yaml: the deploy tests read compose files.
# libcurl4-openssl-dev: FoldtableWebhook POSTs webhooks with libcurl.
RUN_PACKAGES := pkg-config libwebsockets-dev libssl-dev libsqlite3-dev libhiredis-dev libcurl4-openssl-dev
TEST_PACKAGES := $(RUN_PACKAGES) python3-venv python3-pip python3-yaml openssl chromium chromium-driver procps tmux nginx systemd redis-server redis-tools libcap2-bin
# The Autobahn TestSuite runs on pyenv's Python 2.7.18 (from the machine image, not apt); pip
# compiles a few C extensions of its dependencies (wsaccel, ujson) on first install.
AUTOBAHN_PACKAGES := $(RUN_PACKAGES) python3 gcc libc6-dev
BENCH_PACKAGES := $(RUN_PACKAGES) libwebsockets-test-server python3-venv nodejs node-ws redis-server

.PHONY: screenshot run build install readme-config test test-unit test-fuzz test-sanitizers test-e2e test-autobahn test-browser fuzz lint docs bench venv deps-run deps-test clean

# libFuzzer run lengths in seconds per target (6 targets, one after another): bounded in
# `make test` (about a minute in all), longer with `make fuzz`.
FUZZ_TEST_SECONDS ?= 8
FUZZ_SECONDS ?= 300

deps-run:
	@.ci/ensure-packages $(RUN_PACKAGES)

deps-test:
	@.ci/ensure-packages $(TEST_PACKAGES)

# Both programs: the server and the terminal client (`.build/release/foldtable`).
build: deps-run
	$(SWIFT) build -c release --product foldtabled
	$(SWIFT) build -c release --product foldtable

# Installs the binaries, the web client, the systemd unit (paths filled in) and the deploy
# examples under $(DESTDIR)$(PREFIX); README "Deploy" says what to do next.
PREFIX ?= /usr/local
install: deps-run
	$(SWIFT) build -c release --product foldtabled
	$(SWIFT) build -c release --product foldtable
	install -D -m 755 .build/release/foldtabled $(DESTDIR)$(PREFIX)/bin/foldtabled
	install -D -m 755 .build/release/foldtable $(DESTDIR)$(PREFIX)/bin/foldtable
	install -d $(DESTDIR)$(PREFIX)/share/foldtable/web
	install -m 644 web/* $(DESTDIR)$(PREFIX)/share/foldtable/web/
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@WEBDIR@|$(PREFIX)/share/foldtable/web|g' -e 's|@DOCDIR@|$(PREFIX)/share/doc/foldtable|g' \
		deploy/foldtabled.service.in \
		> $(DESTDIR)$(PREFIX)/lib/systemd/system/foldtabled.service
	install -D -m 644 deploy/foldtabled.env.example $(DESTDIR)$(PREFIX)/share/doc/foldtable/foldtabled.env.example
	install -D -m 644 deploy/nginx.conf $(DESTDIR)$(PREFIX)/share/doc/foldtable/nginx.conf
	install -D -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/foldtable/README.md

# Builds both programs, then starts the server on http://127.0.0.1:$(PORT) with the demo
# session; sessions are stored in data/ (SQLite) and survive restarts.
run: build
	.build/release/foldtabled --port $(PORT) --web-root web --data-dir data

# Test packages from PyPI; axe-selenium-python is the accessibility auditor of the browser tests
# (pinned: its bundled axe-core decides which rules run). Remade when this file changes.
venv: $(VENV)/.ready
$(VENV)/.ready: Makefile
	python3 -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check pytest pytest-timeout websockets selenium prometheus-client axe-selenium-python==2.1.6 openapi-spec-validator==0.9.0 schemathesis==4.32.5 standardwebhooks
	touch $@

# Rewrites README's tables of settings from foldtabled's own list of keys (ServerConfig.keys);
# a unit test (ConfigReadmeTests) fails while README and the list differ.
readme-config:
	$(SWIFT) build --product foldtabled
	.build/debug/foldtabled --help-markdown > .build/settings.md
	awk '/<!-- settings: begin/ { print; while ((getline line < ".build/settings.md") > 0) print line; skip = 1; next } \
		/<!-- settings: end/ { skip = 0 } !skip' README.md > .build/README.md && mv .build/README.md README.md
	.build/debug/foldtabled --help-env > deploy/foldtabled.env.example

# Then: no force unwrap, try! or as! in Sources unless its line says why it cannot fail
# (`// safe: ...`): a trap on client input would end every session.
lint:
	$(SWIFT) format lint --strict -r Sources Tests Package.swift
	python3 Tests/lint/traps.py Sources

# The DocC catalogs (protocol, architecture, API) must build without warnings.
docs:
	.ci/docs

# .ci/watch-tests ends a run that hangs and names the tests still running (a deadlock would
# otherwise hold `make test` until CI's own limit, saying nothing).
test-unit:
	$(SWIFT) build --build-tests
	.ci/watch-tests --limit 1200 --quiet-limit 300 -- $(SWIFT) test

# libFuzzer on every parser of outside input (Tests/fuzz: client messages and Table.apply, the
# request policy and HTTP API, tokens, CSV, the config, Redis replies): builds with the Swift
# toolchain's own libFuzzer runtime and lld (no extra package), seeds from Tests/fuzz/corpus*
# and keeps what it finds under .build/fuzz. A crash fails its target and prints the input's path.
# One target or a few: `Tests/fuzz/run.sh SECONDS csv token`.
test-fuzz:
	Tests/fuzz/run.sh $(FUZZ_TEST_SECONDS)

fuzz:
	Tests/fuzz/run.sh $(FUZZ_SECONDS)

# The unit tests under AddressSanitizer and ThreadSanitizer, each in its own build directory
# (.build/asan, .build/tsan); suppressions for code that is not ours are in Tests/sanitizers.
test-sanitizers: deps-run
	SWIFT=$(SWIFT) Tests/sanitizers/run.sh

test-e2e: venv
	$(SWIFT) build -c release
	FOLDTABLE_BIN=.build/release/foldtabled FOLDTABLE_ECHO_BIN=.build/release/foldtable-echo FOLDTABLE_CLIENT_BIN=.build/release/foldtable \
		$(PY) -m pytest -q --timeout 600 Tests/e2e

# RFC 6455 conformance (Autobahn TestSuite) on foldtable-echo; see Tests/autobahn/README.md.
test-autobahn:
	@.ci/ensure-packages $(AUTOBAHN_PACKAGES)
	$(SWIFT) build -c release --product foldtable-echo
	Tests/autobahn/run.sh

test-browser: venv
	$(SWIFT) build -c release --product foldtabled
	FOLDTABLE_BIN=.build/release/foldtabled $(PY) -m pytest -q --timeout 600 Tests/browser

# Refreshes the README screenshot (made by the browser tests against the real server).
screenshot: venv
	$(SWIFT) build -c release --product foldtabled
	FOLDTABLE_BIN=.build/release/foldtabled FOLDTABLE_SCREENSHOT_OUT=$(CURDIR)/Tests/browser/screenshot.png \
		$(PY) -m pytest -q Tests/browser -k demo

# Every suite, each timed; Autobahn runs beside the end-to-end and browser tests (.ci/test-suites
# says why). Every suite runs even after one failed. SERIAL=1 runs them one after another.
test: deps-test
	@.ci/ensure-packages $(AUTOBAHN_PACKAGES)
	$(MAKE) venv
	.ci/test-suites

bench: deps-run
	@.ci/ensure-packages $(BENCH_PACKAGES)
	$(SWIFT) build -c release
	taskset -c 0 .build/release/foldtable-bench core
	taskset -c 0 .build/release/foldtable-bench store --seconds 40 --interval 10
	bash Tests/bench/fanout.sh
	bash Tests/bench/cluster.sh
	bash Tests/bench/cluster-large.sh
	bash Tests/bench/acks.sh
	$(MAKE) venv
	$(PY) Tests/bench/deflate.py

clean:
	rm -rf .build $(VENV)
