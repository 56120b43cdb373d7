#!/bin/bash
# Install what gst-dflash builds and tests with on Debian 12 (as root), and a
# Python virtual environment (.venv) for the parity tests' references. clang,
# its runtime (libFuzzer) and its OpenMP are for the fuzz build
# (scripts/run-tests.sh, tests/fuzz). libsoup is `dflash serve`'s HTTP; curl
# and the openai package are its tests' clients; jinja2 renders the chat
# templates' fixtures (tests/chat).
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
  build-essential meson ninja-build pkg-config \
  libglib2.0-dev libcjson-dev libopenblas-dev libcairo2-dev libsoup-3.0-dev curl \
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev \
  gstreamer1.0-tools gstreamer1.0-plugins-base \
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers \
  python3 python3-venv python3-pip \
  clang libclang-rt-14-dev libomp-14-dev

if [ ! -x .venv/bin/python3 ]; then
  python3 -m venv .venv
fi
.venv/bin/python3 -m pip install -q --disable-pip-version-check \
  'numpy>=1.24' 'safetensors>=0.4' 'tokenizers>=0.19' 'jinja2>=3.1' 'openai>=1.0' \
  'gguf>=0.10'  # llama.cpp's GGUF reader and writer: GGUF tests and the quantized blocks' fixtures
