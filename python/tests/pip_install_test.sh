#!/bin/sh
# pip-installs python/ offline into a temporary --target directory (from a copy of the
# source, so the build leaves nothing in the tree), then imports the installed package from
# elsewhere: once finding libattn.so through ATTN_LIBRARY, once next to the package.
# Usage: pip_install_test.sh <python> <python/ source dir> <libattn.so> <work dir>
set -eu
py=$1 src=$2 lib=$3 work=$4
rm -rf "$work"
mkdir -p "$work/src"
cp -r "$src/attn" "$src/pyproject.toml" "$work/src/"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip install --no-build-isolation \
    --no-deps --no-index --no-cache-dir --target "$work/site" "$work/src" >"$work/pip.log" 2>&1 ||
    { cat "$work/pip.log"; exit 1; }
ls "$work/site" | grep -q '^attn-0.3.0.dist-info$' || { echo "no attn-0.3.0.dist-info"; exit 1; }
cd "$work"
check='import attn, sys
assert attn.__file__.startswith(sys.argv[1]), attn.__file__
assert attn.version() == "0.3.0", attn.version()
print("installed attn", attn.version(), "from", attn.__file__, "library", attn.library_path())'
ATTN_LIBRARY=$lib PYTHONPATH=$work/site "$py" -c "$check" "$work/site/attn"
cp "$lib" "$work/site/attn/libattn.so"
env -u ATTN_LIBRARY PYTHONPATH=$work/site "$py" -c "$check" "$work/site/attn"
echo "pip install: OK"
