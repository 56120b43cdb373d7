#!/bin/bash
# Build llama.cpp's CPU tools once into a cache folder, from the source
# distribution of llama-cpp-python on PyPI (it vendors ggml-org/llama.cpp),
# for benchmarks that run it beside gst-dflash on the same GGUF files. The
# project never links it. About 7 minutes on 2 cores; a second call finds
# the tools and returns at once.
#
#   bash bench/llama-cpp-build.sh [CACHE_DIR]    (default: ~/.cache/gst-dflash)
#
# Prints the folder holding llama-bench, llama-completion, llama-lookup,
# llama-quantize and llama-tokenize.
set -euo pipefail
version=0.3.36
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/gst-dflash}
src="$cache/llama-cpp-python-$version"
bin="$src/vendor/llama.cpp/build/bin"
tools="llama-bench llama-completion llama-lookup llama-quantize llama-tokenize"

have_all () {
  for t in $tools; do [ -x "$bin/$t" ] || return 1; done
}
if have_all; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache"
if [ ! -d "$src" ]; then
  echo "llama-cpp-build: fetching llama-cpp-python $version (source) from PyPI" >&2
  python3 -m pip download -q --no-deps --no-binary :all: -d "$cache" "llama-cpp-python==$version" >&2
  tar -xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
  mv "$cache/llama_cpp_python-$version" "$src"
fi
command -v cmake >/dev/null || { echo "llama-cpp-build: cmake is needed (apt-get install cmake)" >&2; exit 1; }
cd "$src/vendor/llama.cpp"
echo "llama-cpp-build: building $tools (CPU only; several minutes)" >&2
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DBUILD_SHARED_LIBS=OFF >&2
# shellcheck disable=SC2086
cmake --build build -j "$(nproc)" --target $tools >&2
have_all || { echo "llama-cpp-build: the build ended without all of: $tools" >&2; exit 1; }
echo "$bin"
