# Everything a fresh Debian machine needs: `make demo`, `make pipeline` (the Spark pipeline) and `make test`.
VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: test demo pipeline setup system-deps clean

test: setup
	@bash deploy/install-system-deps.sh --for-tests
	$(VENV)/bin/pytest

demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash deploy/demo.sh wordcount

pipeline: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash deploy/demo.sh weblogs

setup: system-deps $(STAMP)

system-deps:
	@bash deploy/install-system-deps.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache storm-local
