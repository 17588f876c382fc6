# Both targets set themselves up on a fresh machine that has only Python.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= attnref-results
FUZZ_TIME ?= 60

.PHONY: test fuzz report backends clean fuzz-gpu

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,ray]'
	touch $(STAMP)

test: $(STAMP)
	ATTNREF_PROFILE=$${ATTNREF_PROFILE:-ci} $(PY) -m pytest -q $(PYTEST_ARGS)

# A finding (exit 1) or a convention finding is a result, not a failed job: the report is written either
# way; a usage or harness error (2, 3) fails it. CI jobs that gate on findings call `attnref fuzz` itself.
fuzz: $(STAMP)
	$(VENV)/bin/attnref fuzz --time $(FUZZ_TIME) --out $(OUT); s=$$?; \
	$(VENV)/bin/attnref probe --out $(OUT) > $(OUT)/probes.txt; \
	$(VENV)/bin/attnref report $(OUT) && [ $$s -le 1 ]

backends: $(STAMP)
	$(VENV)/bin/attnref backends

clean:
	rm -rf $(VENV) $(OUT) .attnref .hypothesis

# On a CUDA machine after the wheel staging calls (docs/gpu-offline.md).
fuzz-gpu:
	bash tools/gpu-setup.sh && bash tools/gpu-campaign.sh
