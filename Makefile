# Everything a fresh Debian machine needs: `make demo`, `make pipeline` (the Spark pipeline) and `make test`.
# Each first installs the Debian packages that are missing (deploy/install-system-deps.sh names them and why
# before it installs; SQUALL_NO_INSTALL=1 only lists them), then the virtualenv with the extras it needs:
# the demo the UI (squall[ui]), the pipeline Spark too (squall[spark,ui]), the tests everything (squall[test]).
# `make docs` builds the documentation site (squall[docs]: mkdocs) into site/.
VENV ?= .venv
PYTHON ?= python3

.PHONY: test demo pipeline docs setup system-deps clean

# Every core: a file's tests on one pytest-xdist worker (a module's cluster starts once), the longest files first.
test: setup
	@bash deploy/install-system-deps.sh --for-tests
	$(VENV)/bin/pytest -n auto --dist loadfile --no-loadscope-reorder

demo: system-deps $(VENV)/.installed-ui
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash deploy/demo.sh wordcount

pipeline: system-deps $(VENV)/.installed-spark,ui
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash deploy/demo.sh weblogs

setup: system-deps $(VENV)/.installed-test

# The documentation site (mkdocs.yml) into site/; --strict: a warning or a dead link fails, as in CI.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

system-deps:
	@bash deploy/install-system-deps.sh

# $(VENV)/.installed-EXTRAS: Squall installed (editable) with those extras; each stamp once per pyproject.toml.
$(VENV)/.installed-%: pyproject.toml
	[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[$*]'
	chmod -R a+rX $(VENV)  # workers run as other users (supervisor.run.worker.as.user) import from it
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache storm-local site
