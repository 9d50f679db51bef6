# The two commands of the README: `make run` and `make test`. Both set up .venv first.
VENV := .venv
STAMP := $(VENV)/.confide-setup

.PHONY: setup run test
setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

# Answer 100 bundled TriviaQA questions with the bundled model, score, grade, evaluate.
run: $(STAMP)
	$(VENV)/bin/confide run $(ARGS)

# The whole test suite (real model, real SQLite, real servers on 127.0.0.1, real browser).
test: $(STAMP)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)
