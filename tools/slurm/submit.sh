#!/usr/bin/env bash
# Submits a sharded memdial sweep to Slurm: an array of N shards and a merge job that
# starts when every shard has ended (however it ended).
#
#   tools/slurm/submit.sh N MODEL SPEC OUT [--wait] [-- SBATCH_ARGS...]
#
# MODEL, SPEC and OUT must be on storage every node sees. Prints the two job ids
# (`array=ID merge=ID`). With --wait it blocks until the merge has finished and exits
# with the merge's exit code (0: PASS; see docs for the others). Extra arguments after
# `--` go to both sbatch calls (partition, account, time limit, …).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -ge 4 ] || { sed -n 2,11p "$0" >&2; exit 2; }
n="$1"; model="$2"; spec="$3"; out="$4"; shift 4
wait=""
if [ "${1:-}" = "--wait" ]; then wait="--wait"; shift; fi
[ "${1:-}" = "--" ] && shift
case "$n" in ''|*[!0-9]*|0) echo "N must be a positive integer, not '$n'" >&2; exit 2;; esac
abs() { (cd "$(dirname "$1")" && printf '%s/%s\n' "$(pwd)" "$(basename "$1")"); }
mkdir -p "$out"
export MEMDIAL_MODEL="$(abs "$model")" MEMDIAL_SPEC="$(abs "$spec")" MEMDIAL_OUT="$(abs "$out")"
export MEMDIAL_SHARDS="$n" MEMDIAL="${MEMDIAL:-$(command -v memdial || echo memdial)}"
array=$(sbatch --parsable --export=ALL --array="1-$n" --chdir="$MEMDIAL_OUT" "$@" "$here/sweep-shard.sbatch")
array="${array%%;*}"
rc=0
merge=$(sbatch --parsable --export=ALL --dependency="afterany:$array" --chdir="$MEMDIAL_OUT" $wait "$@" "$here/merge.sbatch") || rc=$?
merge="${merge%%;*}"
echo "array=$array merge=$merge"
exit "$rc"
