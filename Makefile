# Everything a fresh Debian machine needs: `make demo`, `make pipeline` (the Spark pipeline) and `make test`.
# Each first installs the Debian packages that are missing (deploy/install-system-deps.sh names them and why
# before it installs; SQUALL_NO_INSTALL=1 only lists them), then the virtualenv.
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
	chmod -R a+rX $(VENV)  # workers run as other users (supervisor.run.worker.as.user) import from it
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache storm-local
