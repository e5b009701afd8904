# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fusegen-installed

.PHONY: demo test bench clean system-deps

$(STAMP): pyproject.toml examples/input-slices-plugin/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# distributed: Ray (about 70 MB, under a minute), so the --cluster ray tests run.
	$(BIN)/python -m pip install -q -e '.[test,distributed]'
	# cuDNN graph building works on a CPU; its heavy deps (cutlass-dsl) are only needed on a GPU.
	$(BIN)/python -m pip install -q --no-deps nvidia-cudnn-frontend==1.32.0
	# The example third-party plugin: discovered through its entry point, checked by the conformance suite.
	$(BIN)/python -m pip install -q -e examples/input-slices-plugin
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fusegen run examples/gpu_multi_output.h100_opt.hlo

# Chromium (fusegen report's browser test; the report itself needs no system package), via apt-get when
# root; never fails.
system-deps:
	@scripts/install-system-deps

test: $(STAMP) system-deps
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/python benchmarks/parse_dispatch.py
	$(BIN)/python benchmarks/emitters.py
	$(BIN)/python benchmarks/autotune.py
	$(BIN)/python benchmarks/sort.py
	$(BIN)/python benchmarks/run_time.py
	$(BIN)/python benchmarks/ptx_vs_xla.py

clean:
	rm -rf $(VENV) build *.egg-info
