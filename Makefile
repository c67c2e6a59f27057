# The two front-door commands are `make sandbox` and `make test`; everything else supports them.
PYTHON ?= python3

.PHONY: install system-deps sandbox down test unit lint crds protos bench

install:  ## install gpufleet and its test tools into the current Python
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test]'

system-deps:  ## Debian packages the sandbox and the tests run (openssl, prometheus, chromium), if missing
	@missing=""; for c in openssl prometheus chromium; do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	fi

sandbox: install system-deps  ## start the local control plane with the default GPU fleet and apply the examples
	gpufleet sandbox demo

down:  ## stop the sandbox
	gpufleet sandbox down

test: install system-deps lint  ## build the sandbox binaries if missing, then run every test
	gpufleet sandbox build
	$(PYTHON) -m pytest -q

unit:  ## quick tests only, no cluster
	$(PYTHON) -m pytest -q tests/unit

lint:  ## ruff, formatting, the import layers, strict typing, CRD and device-plugin stub drift
	ruff check .
	ruff format --check .
	lint-imports
	mypy gpufleet/core gpufleet/model gpufleet/scheduler gpufleet/autoscaler gpufleet/app gpufleet/admin gpufleet/settings.py gpufleet/agent gpufleet/operator gpufleet/testing
	$(PYTHON) -m gpufleet.model.crdgen --check
	$(PYTHON) -m gpufleet.agent.deviceplugin.protogen --check

crds:  ## regenerate crds/ and the chart's crds/ from the pydantic models, and the deploy/ manifests
	$(PYTHON) -m gpufleet.model.crdgen
	$(PYTHON) -m gpufleet.sandbox.deploy_manifest

protos:  ## regenerate the device-plugin gRPC stubs from the vendored kubelet proto
	$(PYTHON) -m gpufleet.agent.deviceplugin.protogen
