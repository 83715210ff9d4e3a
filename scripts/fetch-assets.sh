#!/usr/bin/env bash
# Fetches the assets herd may not commit: Llama 3's tokenizer.model, which is governed by the Meta
# Llama 3 Community License. It goes to assets/tokenizer/llama3/ (git-ignored) with the licence notice.
# Source, in order: the shared copy ../shared/data/tokenizer/llama3/ when this checkout has one, else
# the PyPI wheel of `llama-models` (the file is llama_models/llama3/tokenizer.model inside it). The
# file is verified by sha256 either way. Idempotent: silent and immediate when the asset is in place.
# The corpus needs nothing: corpus/sotu.jsonl.xz is public domain and vendored.
set -euo pipefail
cd "$(dirname "$0")/.."

dest=assets/tokenizer/llama3
sha=82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55
wheel_version=0.3.0
shared=../shared/data/tokenizer/llama3
notice="Meta Llama 3 is licensed under the Meta Llama 3 Community License, Copyright © Meta Platforms, Inc. All Rights Reserved."

valid() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha" ]; }

if valid "$dest/tokenizer.model" && [ -f "$dest/LICENSE" ] && [ -f "$dest/NOTICE" ]; then exit 0; fi

mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if valid "$shared/tokenizer.model"; then
  cp "$shared/tokenizer.model" "$tmp/tokenizer.model"
  [ -f "$shared/LICENSE" ] && cp "$shared/LICENSE" "$tmp/LICENSE"
  source_note="copied from $shared"
else
  echo "fetch-assets: downloading llama-models==$wheel_version from PyPI for the Llama 3 tokenizer" >&2
  python3 -m pip download --no-deps --only-binary=:all: --quiet --disable-pip-version-check \
    -d "$tmp/wheel" "llama-models==$wheel_version" >&2
  python3 - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(tmp + "/wheel/llama_models-*.whl")[0])
with open(tmp + "/tokenizer.model", "wb") as f:
    f.write(wheel.read("llama_models/llama3/tokenizer.model"))
# The wheel ships a licence pointer (a URL), not the licence text; keep it beside the notice.
licences = [n for n in wheel.namelist() if n.endswith("/LICENSE")]
if licences:
    with open(tmp + "/LICENSE.wheel", "wb") as f:
        f.write(wheel.read(licences[0]))
PY
  source_note="extracted from the PyPI wheel llama-models $wheel_version (llama_models/llama3/tokenizer.model)"
fi

if ! valid "$tmp/tokenizer.model"; then
  echo "fetch-assets: error: tokenizer.model does not have sha256 $sha; the source is corrupt or changed" >&2
  exit 1
fi
if [ ! -f "$tmp/LICENSE" ]; then
  {
    echo "META LLAMA 3 COMMUNITY LICENSE AGREEMENT"
    echo
    echo "The full text is at https://www.llama.com/llama3/license/ (the llama-models wheel ships only a"
    echo "pointer to it, reproduced below). tokenizer.model in this directory is a Llama Material under it."
    echo
    [ -f "$tmp/LICENSE.wheel" ] && cat "$tmp/LICENSE.wheel"
  } >"$tmp/LICENSE"
fi
printf '%s\n\ntokenizer.model: %s\nsha256 %s\n' "$notice" "$source_note" "$sha" >"$tmp/NOTICE"
chmod 644 "$tmp/tokenizer.model" "$tmp/LICENSE" "$tmp/NOTICE"
mv -f "$tmp/tokenizer.model" "$tmp/LICENSE" "$tmp/NOTICE" "$dest/"
echo "fetch-assets: $dest/tokenizer.model ($source_note)" >&2
