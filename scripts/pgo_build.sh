#!/usr/bin/env bash
# The Rust extension's profile-guided release build (README §Two commands, DESIGN.md §The build: profile-
# guided), run by `make dev` and `make gpu-test`:
#   1. an instrumented build (rustc -Cprofile-generate) installed into the venv,
#   2. the training runs (scripts/pgo_train.py) write their profiles,
#   3. llvm-profdata merges them,
#   4. the release build that is installed reads them (rustc -Cprofile-use).
# Steps 1-3 run only when no profile was made for the compiler, RUSTFLAGS, the Rust sources, Cargo's files
# and these two scripts as they are now (its key, below); otherwise only step 4 runs (a no-op for Cargo
# when nothing changed). Without an llvm-profdata that reads this rustc's profiles (rustup's llvm-tools, else
# Debian's llvm-profdata-NN), or with PGO=0, it builds without a profile and says so.
#
#   scripts/pgo_build.sh [EXTRAS]      # EXTRAS: the package's extras to install (default: test)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${VENV:-.venv}
EXTRAS=${1:-test}
OUT=$ROOT/target/pgo
MATURIN=("$VENV/bin/maturin" develop --release --extras "$EXTRAS" -q)

plain() {
    echo "pgo_build: $1; building without a profile" >&2
    "${MATURIN[@]}"
    exit 0
}

[ "${PGO:-1}" = 0 ] && plain "PGO=0"

# An llvm-profdata whose LLVM reads this rustc's raw profiles: rustup's llvm-tools (the same LLVM), else
# Debian's, newest first (a merge that fails falls back to the plain build below).
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
host=$(rustc -vV | sed -n 's/^host: //p')
tools=$(rustc --print sysroot)/lib/rustlib/$host/bin
if [ ! -x "$tools/llvm-profdata" ] && command -v rustup >/dev/null; then
    rustup component add llvm-tools >/dev/null 2>&1 || true
fi
profdata=""
for p in "$tools/llvm-profdata" $(seq -f "/usr/lib/llvm-%g/bin/llvm-profdata" "$llvm_major" -1 19); do
    if [ -x "$p" ]; then
        profdata=$p
        break
    fi
done
[ -n "$profdata" ] || plain "no llvm-profdata for LLVM $llvm_major (rustup component add llvm-tools, or apt install llvm-19)"

# The profile's key: what the instrumented build and the training runs depend on.
key=$( (rustc -vV; echo "${RUSTFLAGS:-}"; cat Cargo.toml Cargo.lock scripts/pgo_train.py scripts/pgo_build.sh;
    find rust -name '*.rs' -o -name Cargo.toml | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-16)
profile=$OUT/kvsim-$key.profdata # (its name in RUSTFLAGS: a new profile makes Cargo rebuild)
if [ ! -f "$profile" ]; then
    echo "pgo_build: instrumented build, training runs (scripts/pgo_train.py), merge with $profdata" >&2
    rm -rf "$OUT/raw" "$OUT"/kvsim-*.profdata
    mkdir -p "$OUT/raw"
    RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$OUT/raw" CARGO_TARGET_DIR=$OUT/gen \
        KVSIM_PGO_PROFILE=kvsim-$key "${MATURIN[@]}" ||
        plain "the instrumented build failed (rustc's profiler runtime missing?)"
    # (a training run that fails is kvsim's bug: the build stops)
    "$VENV/bin/python" scripts/pgo_train.py
    if ! "$profdata" merge -o "$profile.tmp" "$OUT/raw"; then
        rm -f "$profile.tmp"
        plain "$profdata could not merge the profiles"
    fi
    mv "$profile.tmp" "$profile"
    rm -rf "$OUT/raw"
fi
# (`kvsim._core.PGO_PROFILE` names the profile, as in the instrumented build: the same code was trained)
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$profile" CARGO_TARGET_DIR=$OUT/use \
    KVSIM_PGO_PROFILE=kvsim-$key "${MATURIN[@]}" ||
    plain "rustc could not build with the profile $profile"
