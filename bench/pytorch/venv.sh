# Sourced by the PyTorch benchmarks (bench/compare-pytorch.sh, bench/vit-pytorch.sh): makes
# the venv $venv with torch $TORCH_VERSION from PyPI (the wheel with its CUDA libraries when the
# --no-deps install does not import without them) and numpy. Expects venv, py, work,
# TORCH_VERSION and log() from the caller.
if [ ! -x "$py" ]; then
    log "creating $venv"
    python3 -m venv "$venv"
    "$py" -m pip install -q --upgrade pip
fi
if ! "$py" -c "import torch" 2>/dev/null; then
    log "installing torch $TORCH_VERSION without its CUDA dependencies"
    "$py" -m pip install -q --no-deps "torch==$TORCH_VERSION"
    "$py" -m pip install -q filelock typing-extensions sympy networkx jinja2 fsspec mpmath \
        markupsafe numpy "setuptools>=77.0.3"
    if ! "$py" -c "import torch" 2>"$work/logs/torch-import.log"; then
        # The PyPI Linux wheel links CUDA libraries even for CPU use.
        log "torch does not import without its CUDA libraries; installing the full wheel (GBs)"
        "$py" -m pip install -q "torch==$TORCH_VERSION"
    fi
fi
"$py" -c "import numpy" 2>/dev/null || "$py" -m pip install -q numpy
"$py" -c "import torch; print('torch', torch.__version__)" >&2

