#!/usr/bin/env bash
# Download, on the development machine, the wheels cpbcg needs on the bare GPU node that its
# image lacks (the image has torch 2.11 and Python 3.12, usually numpy, and reaches no package
# registry). Wheels go to .whl/ (git-ignored); scripts/gpu_check.sh installs them from there
# with `pip install --no-index --no-deps --target`. torch is never fetched.
#
#   scripts/fetch_wheels.sh                # versions pinned to this machine's environment
#   PIP="python3 -m pip" scripts/fetch_wheels.sh
#
# Versions are those installed here (`pip list`), so the GPU node runs what the tests ran; a
# package missing here is fetched at its newest version. numpy goes to .whl/optional/ and is
# installed only where the image has none. Afterwards every wheel's Requires-Dist is checked
# (unzip -p, markers evaluated for Linux CPython 3.12): a requirement not fetched, other than
# torch or numpy, is printed and the script exits 1.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x /work/venv/bin/python ] && echo /work/venv/bin/python || echo python3 )}
PIP=${PIP:-"$PY -m pip"}
DEST=.whl
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
        --platform any)
# Runtime dependencies (pyproject) the CLI and capture import, their dependencies, and pytest
# for `pytest -m gpu`. matplotlib is left out: only `recommend --plot` imports it.
PACKAGES=(orjson pydantic pydantic-core typing-extensions annotated-types typing-inspection
          typer annotated-doc click rich shellingham markdown-it-py mdurl pygments pyyaml
          pytest pluggy iniconfig packaging)
OPTIONAL=(numpy)

pinned() {  # name -> name==version installed here, or name
  local v
  v=$($PIP show "$1" 2>/dev/null | sed -n 's/^Version: //p')
  if [ -n "$v" ]; then echo "$1==$v"; else echo "$1"; fi
}

rm -rf "$DEST" && mkdir -p "$DEST/optional"
specs=(); for p in "${PACKAGES[@]}"; do specs+=("$(pinned "$p")"); done
opt=(); for p in "${OPTIONAL[@]}"; do opt+=("$(pinned "$p")"); done
echo "fetching for cp312 manylinux x86_64: ${specs[*]} (+ optional ${opt[*]})"
rc=0
quiet() { grep -v "is ignored: it is neither a file nor a directory" >&2 || true; }  # a local index this machine lacks
$PIP download -q --no-deps "${TARGET[@]}" -d "$DEST" "${specs[@]}" 2> >(quiet) || rc=1
$PIP download -q --no-deps "${TARGET[@]}" -d "$DEST/optional" "${opt[@]}" 2> >(quiet) || rc=1

# Check the dependency closure: every Requires-Dist that applies on Linux x86_64 CPython 3.12
# (markers evaluated with `packaging`) must be fetched, or be torch / numpy.
for w in "$DEST"/*.whl; do
  unzip -p "$w" '*.dist-info/METADATA' | sed -n "s|^Requires-Dist: |$(basename "$w")\t|p"
done > "$DEST/requires.txt"
"$PY" - "$DEST" <<'PY' || rc=1
import pathlib, re, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
dest = pathlib.Path(sys.argv[1])
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "extra": ""}
have = {canonicalize_name(w.name.split("-")[0]) for w in dest.rglob("*.whl")} | {"torch", "numpy"}
missing = []
for line in (dest / "requires.txt").read_text().splitlines():
    wheel, spec = line.split("\t", 1)
    req = Requirement(spec)
    if (req.marker is None or req.marker.evaluate(env)) and canonicalize_name(req.name) not in have:
        missing.append(f"{req.name} (from {wheel})")
print("MISSING dependencies: " + ", ".join(missing) if missing else "dependency closure complete (torch and numpy excepted)")
sys.exit(1 if missing else 0)
PY
ls -1 "$DEST" "$DEST/optional" | grep '\.whl$' | sed 's/^/  /'
echo "$(ls "$DEST"/*.whl "$DEST"/optional/*.whl 2>/dev/null | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST/"
exit $rc
