# The two front-door commands are `make sandbox` and `make test`; everything else supports them.
PYTHON ?= python3

.PHONY: install sandbox down test unit lint crds bench

install:  ## install gpufleet and its test tools into the current Python
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[test]'

sandbox: install  ## start the local control plane with the default GPU fleet and apply the examples
	gpufleet sandbox demo

down:  ## stop the sandbox
	gpufleet sandbox down

test: install lint  ## build the sandbox binaries if missing, then run every test
	gpufleet sandbox build
	$(PYTHON) -m pytest -q

unit:  ## quick tests only, no cluster
	$(PYTHON) -m pytest -q tests/unit

lint:  ## ruff, formatting, strict typing of the pure core, CRD drift
	ruff check .
	ruff format --check .
	mypy gpufleet/core gpufleet/model
	$(PYTHON) -m gpufleet.model.crdgen --check

crds:  ## regenerate crds/ from the pydantic models
	$(PYTHON) -m gpufleet.model.crdgen
