#!/usr/bin/env bash
# The GPU call rehearsed on this CPU: benchmarks/device_run.py --device cpu --quick in a virtual environment that
# holds only torch and numpy (as a GPU machine holds only its torch), installing from a bundle, with the network cut
# (`unshare -n`, where this machine allows it).
#
#   tools/rehearse_device_run.sh [--official-repo ALRP --ranksort-repo RS --brl-repo BRL] [--detectron2 PATH]
#       [--work DIR]
#
# 1. A virtual environment in WORK/venv with this interpreter's torch version and numpy (uv's cache where uv is
#    installed, else PyPI; kept for the next rehearsal while it still holds nothing else).
# 2. A bundle in WORK/bundle by tools/make_device_bundle.sh for this Python, with the torchvision wheel of this
#    torch (network; kept for the next rehearsal). Without the three repositories the reference losses are left out
#    and the report says so.
# 3. benchmarks/device_run.py --device cpu --quick from the bundle, network cut; fails unless every benchmark
#    finished and every section of benchmarks/gpu_report.py is in WORK/out/report.md.
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=${TMPDIR:-/tmp}/alrp_rehearsal
REFERENCES=()
DETECTRON2=()
while [ $# -gt 0 ]; do
  case "$1" in
    --work) WORK=$2; shift 2 ;;
    --official-repo | --ranksort-repo | --brl-repo) REFERENCES+=("$1" "$2"); shift 2 ;;
    --detectron2) DETECTRON2=(--detectron2 "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "rehearse_device_run: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#REFERENCES[@]} -gt 0 ] || REFERENCES=(--no-references)
VENV=$WORK/venv BUNDLE=$WORK/bundle
START=$SECONDS
phase() { echo "rehearse_device_run: $1 ($((SECONDS - START)) s)"; }

read -r PY TORCH TORCHVISION < <(python3 -c 'import sys, torch, torchvision
print("%d.%d" % sys.version_info[:2], torch.__version__.split("+")[0], torchvision.__version__.split("+")[0])')

# Nothing but torch, numpy and their dependencies: the packages device_run.py installs must not be there.
pristine() {
  "$VENV/bin/python" - <<'EOF'
import importlib.util, sys
extra = [m for m in ("torchvision", "detectron2", "fvcore", "PIL", "cv2", "yaml", "pytest") if importlib.util.find_spec(m)]
sys.exit(f"{sys.prefix} holds {extra}" if extra else 0)
EOF
}
if [ ! -x "$VENV/bin/python" ] || ! pristine; then
  phase "a virtual environment with torch $TORCH and numpy only, in $VENV"
  rm -rf "$VENV"
  if command -v uv >/dev/null 2>&1; then
    # uv links torch from its cache (filled by uv sync) instead of downloading it again; --seed adds pip.
    uv venv --quiet --seed --python python3 "$VENV"
    uv pip install --quiet --python "$VENV/bin/python" "torch==$TORCH" numpy
  else
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$TORCH" numpy
  fi
  pristine
fi
if [ ! -f "$BUNDLE/SOURCES.txt" ]; then
  phase "the bundle for Python $PY in $BUNDLE"
  # the environment's pip downloads (an environment made by uv has none)
  PATH="$VENV/bin:$PATH" bash tools/make_device_bundle.sh --out "$BUNDLE" --python "$PY" --torchvision "$TORCHVISION:$PY" \
    "${REFERENCES[@]}" ${DETECTRON2[@]+"${DETECTRON2[@]}"}
fi

NO_NETWORK=()
if unshare -n true 2>/dev/null; then NO_NETWORK=(unshare -n); fi
phase "benchmarks/device_run.py --device cpu --quick ${NO_NETWORK[*]:+(network cut: ${NO_NETWORK[*]})}"
status=0
PIP_NO_INDEX=1 ${NO_NETWORK[@]+"${NO_NETWORK[@]}"} "$VENV/bin/python" benchmarks/device_run.py --device cpu --quick \
  --bundle "$BUNDLE" --out "$WORK/out" --work "$WORK/run" --budget "${REHEARSAL_BUDGET:-1800}" || status=$?
for section in "## The machine" "## Install" "### Exactness" "### Loss speed" "### Training iteration" \
  "### Host synchronisations per training step" "### Peak memory of aLRP Loss"; do
  grep -qF "$section" "$WORK/out/report.md" || { echo "rehearse_device_run: no '$section' in $WORK/out/report.md" >&2; status=1; }
done
phase "done, exit status $status; the report is $WORK/out/report.md"
exit "$status"
