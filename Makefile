# The two commands of the README: `make run` and `make test`. Each sets up .venv first:
# `run` only what running needs (compiles nothing); `test` adds the test set-up.
VENV := .venv
RUN_SETUP := $(VENV)/.confide-run-setup
TEST_SETUP := $(VENV)/.confide-test-setup

.PHONY: setup run test lint docs
setup: $(RUN_SETUP)

$(RUN_SETUP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh run
	touch $@

$(TEST_SETUP): $(RUN_SETUP)
	bash scripts/setup.sh test
	touch $@

# Answer 200 bundled TriviaQA questions with the bundled model, score, grade, evaluate.
run: $(RUN_SETUP)
	$(VENV)/bin/confide run $(ARGS)

# The whole test suite (real model, real SQLite, real servers on 127.0.0.1, real browser).
test: $(RUN_SETUP) $(TEST_SETUP)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# The lint and type gates (ruff, mypy; configured in pyproject.toml), run by .ci/run.
lint: $(RUN_SETUP) $(TEST_SETUP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml), built offline in strict mode into build/site.
docs: $(RUN_SETUP) $(TEST_SETUP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict -d build/site
