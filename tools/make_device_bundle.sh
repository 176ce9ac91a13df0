#!/usr/bin/env bash
# Makes device_bundle/: what benchmarks/device_run.sh installs from on a GPU machine without network.
#
#   tools/make_device_bundle.sh --official-repo ALRP --ranksort-repo RS --brl-repo BRL [--out device_bundle]
#       [--python 3.10 --python 3.11 ...] [--torchvision VERSION:PYTHON ...] [--detectron2 PATH]
#   tools/make_device_bundle.sh --no-references ...     # without the reference losses (reported as not run)
#
# Needs pip with access to PyPI. Writes, into --out (default device_bundle/, ignored by git; carried by the device
# call):
#   wheels/      a wheel of each package of benchmarks/device_requirements.txt for each --python (default 3.10-3.13,
#                manylinux x86-64) that its marker admits: the pinned version, or the newest with a wheel for that
#                Python. Pure-Python
#                packages published only as a source archive (fvcore, antlr4) are built into wheels here. With
#                --torchvision VERSION:PYTHON also that torchvision wheel (for a machine whose torch has none).
#   detectron2-02b5c4e.tar.gz   detectron2's vendored source (../shared/vendor, or --detectron2 PATH).
#   references/  the reference losses that benchmarks/gpu_report.py loads (benchmarks/reference_losses.py): the
#                official aLRP Loss and AP Loss (kemaloksuz/aLRPLoss), the official Rank & Sort Loss
#                (kemaloksuz/RankSortLoss) and BRL's (blisgard/BucketedRankingBasedLosses), copied as files from
#                the checkouts (or bare git directories) given, never committed.
#   SOURCES.txt  where each file came from, its size and sha256.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT_DIR=device_bundle
DETECTRON2=../shared/vendor/detectron2-02b5c4e.tar.gz
PYTHONS=()
TORCHVISION=()
declare -A REPOS=()
REFERENCES=yes
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR=$2; shift 2 ;;
    --python) PYTHONS+=("$2"); shift 2 ;;
    --torchvision) TORCHVISION+=("$2"); shift 2 ;;
    --detectron2) DETECTRON2=$2; shift 2 ;;
    --official-repo) REPOS[aLRPLoss]=$2; shift 2 ;;
    --ranksort-repo) REPOS[RankSortLoss]=$2; shift 2 ;;
    --brl-repo) REPOS[BRL]=$2; shift 2 ;;
    --no-references) REFERENCES=no; shift ;;
    -h | --help) usage 0 ;;
    *) echo "make_device_bundle: unknown argument $1" >&2; usage 2 >&2 ;;
  esac
done
[ ${#PYTHONS[@]} -gt 0 ] || PYTHONS=(3.10 3.11 3.12 3.13)
for name in aLRPLoss RankSortLoss BRL; do
  [ "$REFERENCES" = no ] || [ -n "${REPOS[$name]:-}" ] || { echo "make_device_bundle: give --official-repo, --ranksort-repo and --brl-repo" \
    "(checkouts or git directories of kemaloksuz/aLRPLoss, kemaloksuz/RankSortLoss, blisgard/BucketedRankingBasedLosses)" >&2; exit 2; }
done
[ -f "$DETECTRON2" ] || { echo "make_device_bundle: $DETECTRON2 does not exist (--detectron2 PATH)" >&2; exit 2; }
python3 -m pip --version >/dev/null 2>&1 || { echo "make_device_bundle: $(command -v python3) has no pip" \
  "(an environment made by uv has none: put one with pip first on PATH)" >&2; exit 2; }

# name==version of benchmarks/device_requirements.txt (as benchmarks/device_run.py reads it): all, or those whose
# marker admits Python $1.
requirements() {
  python3 - "${1:-}" <<'EOF'
import sys
sys.path.insert(0, "benchmarks")
from device_run import read_requirements
python = tuple(map(int, sys.argv[1].split("."))) if sys.argv[1] else None
print("\n".join(f"{r.name}=={r.version}" for r in read_requirements() if python is None or r.applies(python)))
EOF
}
mapfile -t REQS < <(requirements)
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/wheels" "$OUT_DIR/references"
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
pip_quiet() { python3 -m pip "$@" 2>&1 | grep -v "^WARNING: Location" || true; }

# Pure-Python packages: one wheel serves every Python (built here when PyPI has only a source archive).
echo "make_device_bundle: wheels of ${#REQS[@]} packages"
python3 -m pip wheel --quiet --no-deps -w "$SCRATCH/local" "${REQS[@]}" 2>&1 | grep -v "^WARNING: Location" || true
BINARY=()
for req in "${REQS[@]}"; do
  name=${req%%==*}
  pattern=$(echo "$name" | tr '[:upper:]-' '[:lower:]_')
  wheel=$(find "$SCRATCH/local" -iname "${pattern}-*.whl" | head -n 1)
  [ -n "$wheel" ] || { echo "make_device_bundle: pip built no wheel of $req" >&2; exit 1; }
  case "$wheel" in
    *-none-any.whl) cp "$wheel" "$OUT_DIR/wheels/" ;;
    *) BINARY+=("$req") ;;
  esac
done

# Compiled packages: a wheel for each Python, the pinned version or else the newest that has one.
for version in "${PYTHONS[@]}"; do
  mapfile -t APPLY < <(requirements "$version")
  for req in "${BINARY[@]}"; do
    [[ " ${APPLY[*]} " == *" $req "* ]] || continue
    target=(--no-deps --only-binary=:all: --python-version "$version" --implementation cp "${PLATFORMS[@]}")
    if ! python3 -m pip download --quiet "${target[@]}" -d "$OUT_DIR/wheels" "$req" >"$SCRATCH/log" 2>&1; then
      echo "make_device_bundle: no wheel of $req for Python $version; the newest with one instead"
      pip_quiet download --quiet "${target[@]}" -d "$OUT_DIR/wheels" "${req%%==*}"
    fi
  done
done
for spec in ${TORCHVISION[@]+"${TORCHVISION[@]}"}; do
  pip_quiet download --quiet --no-deps --only-binary=:all: --python-version "${spec#*:}" --implementation cp \
    "${PLATFORMS[@]}" -d "$OUT_DIR/wheels" "torchvision==${spec%%:*}"
done

# Every package must now resolve from the bundle alone, for every Python.
for version in "${PYTHONS[@]}"; do
  mapfile -t APPLY < <(requirements "$version")
  python3 -m pip download --quiet --no-index --find-links "$OUT_DIR/wheels" --no-deps --only-binary=:all: \
    --python-version "$version" --implementation cp "${PLATFORMS[@]}" -d "$SCRATCH/check-$version" \
    "${APPLY[@]%%==*}" >"$SCRATCH/log" 2>&1 || {
    cat "$SCRATCH/log" >&2
    echo "make_device_bundle: the bundle lacks a wheel for Python $version (above)" >&2
    exit 1
  }
done

cp "$DETECTRON2" "$OUT_DIR/detectron2-02b5c4e.tar.gz"

# The reference losses, as benchmarks/reference_losses.py finds them in a checkout.
copy_reference() { # name, path in the repository
  local repo=${REPOS[$1]} into="$OUT_DIR/references/$1/$2" commit
  mkdir -p "$(dirname "$into")"
  if [ -f "$repo/$2" ]; then # a checkout
    cp "$repo/$2" "$into"
  else # a git directory, bare or without a work tree
    git -C "$repo" show "HEAD:$2" >"$into" || { echo "make_device_bundle: no $2 in $repo" >&2; exit 1; }
  fi
  commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo "an unknown commit")
  echo "references/$1/$2: $repo at $commit" >>"$SCRATCH/references"
}
: >"$SCRATCH/references"
if [ "$REFERENCES" = yes ]; then
  copy_reference aLRPLoss mmdet/models/losses/alrp_loss.py
  copy_reference aLRPLoss mmdet/models/losses/ap_loss.py
  copy_reference RankSortLoss mmdet/models/losses/ranking_losses.py
  copy_reference BRL mmdet/models/losses/ranking_losses.py
fi

{
  echo "# made by tools/make_device_bundle.sh on $(date -u +%Y-%m-%dT%H:%MZ) for Python ${PYTHONS[*]}"
  cat "$SCRATCH/references"
  (cd "$OUT_DIR" && find . -type f ! -name SOURCES.txt | sort | xargs sha256sum | while read -r sum path; do
    echo "${path#./} $(stat -c %s "$path") bytes sha256 $sum"
  done)
} >"$OUT_DIR/SOURCES.txt"
echo "make_device_bundle: $OUT_DIR holds $(find "$OUT_DIR" -type f | wc -l) files," \
  "$(du -sb "$OUT_DIR" | cut -f1) bytes ($(du -sh "$OUT_DIR" | cut -f1))"
