#!/usr/bin/env bash
# Build the other engines memdial's sweeps compare against, outside the repository.
#
#   tools/build-engines.sh DIR [--kimi-k3-in-c SRC] [--portable] [--jobs N]
#
# Into DIR (created; works from any working directory):
#   - llama.cpp, a CPU build of the library from the source vendored in the
#     llama-cpp-python sdist (PyPI; no git), then memdial's driver tools/llama-ids
#     against it: DIR/bin/llama_ids;
#   - kimi-k3-in-c from SRC, a source directory you have (copied to DIR/kimi-k3-in-c,
#     built with make): DIR/kimi-k3-in-c/bin/k3. SRC is never deleted: when SRC is
#     DIR/kimi-k3-in-c it is built in place; a SRC inside that folder, a DIR inside SRC,
#     or a DIR/kimi-k3-in-c this script did not copy is refused (exit 2).
# cmake comes from PATH, else apt-get (as root), else its PyPI wheel in DIR/tools-venv.
# Prints the `export MEMDIAL_…=…` lines at the end and writes them to DIR/env.sh.
# Environment: LLAMA_CPP_PYTHON_VERSION (default 0.3.36), PIP (default python3 -m pip).
# Steps already done (the sdist, the configured build) are reused on a second run.
set -euo pipefail

usage() {
    echo "usage: $0 DIR [--kimi-k3-in-c SRC] [--portable] [--jobs N]" >&2
    exit 2
}

[ $# -ge 1 ] || usage
DIR=$1
shift
K3C_SRC=""
NATIVE=ON
JOBS=2
while [ $# -gt 0 ]; do
    case $1 in
    --kimi-k3-in-c) [ $# -ge 2 ] || usage; K3C_SRC=$2; shift 2 ;;
    --portable) NATIVE=OFF; shift ;;
    --jobs) [ $# -ge 2 ] || usage; JOBS=$2; shift 2 ;;
    *) usage ;;
    esac
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
PIP=${PIP:-python3 -m pip}
log() { echo "build-engines: $*" >&2; }

if [ -n "$K3C_SRC" ]; then
    [ -f "$K3C_SRC/Makefile" ] || { log "$K3C_SRC has no Makefile: not a kimi-k3-in-c source"; exit 2; }
    K3C_SRC=$(cd "$K3C_SRC" && pwd -P)
    K3C_DEST=$(cd "$DIR" && pwd -P)/kimi-k3-in-c
    # The source is never deleted: the destination is rebuilt in place when it is the
    # source, refused when one holds the other, and replaced only when this script made it.
    if [ "$K3C_SRC" = "$K3C_DEST" ]; then
        K3C_IN_PLACE=1
    else
        K3C_IN_PLACE=0
        case "$K3C_SRC/" in "$K3C_DEST"/*) log "refused: SRC $K3C_SRC is inside $K3C_DEST, which this script replaces; pass $K3C_DEST itself to build in place, or keep SRC elsewhere"; exit 2 ;; esac
        case "$K3C_DEST/" in "$K3C_SRC"/*) log "refused: $K3C_DEST (the copy) would be inside SRC $K3C_SRC; choose a DIR outside SRC"; exit 2 ;; esac
        if [ -e "$K3C_DEST" ] && [ ! -f "$K3C_DEST/.memdial-build-engines-copy" ]; then
            log "refused: $K3C_DEST exists and was not copied there by this script; move it away, or pass it as SRC to build it in place"
            exit 2
        fi
    fi
fi

# cmake: PATH, apt-get, or the PyPI wheel.
if ! command -v cmake >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get install -y cmake >&2; then
        log "cmake from apt"
    else
        log "cmake from its PyPI wheel into $DIR/tools-venv"
        python3 -m venv "$DIR/tools-venv"
        "$DIR/tools-venv/bin/pip" install -q cmake
        export PATH=$DIR/tools-venv/bin:$PATH
    fi
fi

# llama.cpp from the sdist. --no-binary only for this package: `:all:` would also
# build pip's own build dependencies (cmake) from source.
SDIST=$DIR/src/llama_cpp_python-$VER.tar.gz
if [ ! -f "$SDIST" ]; then
    mkdir -p "$DIR/src"
    log "downloading the llama-cpp-python $VER sdist"
    $PIP download -q --no-deps --no-binary llama-cpp-python -d "$DIR/src" "llama-cpp-python==$VER"
fi
L=$DIR/src/llama_cpp_python-$VER/vendor/llama.cpp
[ -d "$L" ] || tar xzf "$SDIST" -C "$DIR/src"
[ -f "$L/include/llama.h" ] || { log "$SDIST has no vendor/llama.cpp"; exit 1; }
B=$DIR/llama.cpp-build
log "building llama.cpp (GGML_NATIVE=$NATIVE, -j$JOBS) in $B"
nice -n 5 cmake -S "$L" -B "$B" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$NATIVE \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >&2
nice -n 5 cmake --build "$B" --target llama -j"$JOBS" >&2

mkdir -p "$DIR/bin"
log "building llama_ids"
nice -n 5 g++ -O2 -std=c++17 -DLLAMA_IDS_BUILD="\"llama.cpp of llama-cpp-python $VER, GGML_NATIVE=$NATIVE\"" \
    "$REPO/tools/llama-ids/llama_ids.cpp" -I"$L/include" -I"$L/ggml/include" \
    "$B/src/libllama.a" "$B/ggml/src/libggml.a" "$B/ggml/src/libggml-cpu.a" \
    "$B/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -o "$DIR/bin/llama_ids"
"$DIR/bin/llama_ids" --version >&2 || { log "$DIR/bin/llama_ids does not run"; exit 1; }
echo "$VER GGML_NATIVE=$NATIVE" >"$DIR/bin/llama_ids.version"

ENV=$DIR/env.sh
echo "export MEMDIAL_LLAMA_BIN=$DIR/bin/llama_ids" >"$ENV"

if [ -n "$K3C_SRC" ]; then
    log "building kimi-k3-in-c from $K3C_SRC"
    if [ "$K3C_IN_PLACE" = 0 ]; then
        rm -rf "$K3C_DEST"
        cp -r "$K3C_SRC" "$K3C_DEST"
        echo "copied from $K3C_SRC by tools/build-engines.sh; replaced on the next run" >"$K3C_DEST/.memdial-build-engines-copy"
    fi
    nice -n 5 make -C "$DIR/kimi-k3-in-c" -j"$JOBS" all >&2
    [ -x "$DIR/kimi-k3-in-c/bin/k3" ] || { log "make did not write bin/k3"; exit 1; }
    echo "export MEMDIAL_K3C_BIN=$DIR/kimi-k3-in-c/bin/k3" >>"$ENV"
fi

log "done; the exports are also in $ENV (source it)"
cat "$ENV"
