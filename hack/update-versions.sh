#!/usr/bin/env bash
# Fills in the sha256 sums of templates/versions.yaml from the upstream
# releases, for the versions the file names: the .sha256 files dl.k8s.io
# publishes next to each kubelet and kubectl, and the .sha256sum files of
# containerd's GitHub releases. Needs the internet, so it is not part of
# make test. To move to a new patch release, edit its version in the file
# first, then run this and review the diff (git diff templates/versions.yaml).
#
# usage: hack/update-versions.sh
set -Eeuo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
file=$root/templates/versions.yaml
archs=(amd64 arm64)

fetch_sum() { # URL: prints the first word of the file at URL, checked to be a sha256
  local sum
  sum=$(curl --fail --silent --show-error --location --retry 3 --max-time 60 "$1" | awk '{ print $1; exit }')
  if [[ ! "$sum" =~ ^[0-9a-f]{64}$ ]]; then
    echo "update-versions: $1 did not give a sha256 sum" >&2
    return 1
  fi
  echo "$sum"
}

# sums_line KEY URL-WITH-@ARCH@: prints "KEY: {amd64: <sum>, arm64: <sum>}".
sums_line() {
  local key=$1 url=$2 arch parts=()
  for arch in "${archs[@]}"; do
    parts+=("$arch: $(fetch_sum "${url//@ARCH@/$arch}")")
  done
  printf '%s: {%s, %s}' "$key" "${parts[0]}" "${parts[1]}"
}

url_for() { # WHAT VERSION: the sum file's URL, with @ARCH@ for the architecture
  case "$1" in
    kubelet | kubectl) echo "https://dl.k8s.io/release/v$2/bin/linux/@ARCH@/$1.sha256" ;;
    containerd) echo "https://github.com/containerd/containerd/releases/download/v$2/containerd-$2-linux-@ARCH@.tar.gz.sha256sum" ;;
  esac
}

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# Sums are written either in flow style ("kubelet: {amd64: ..., arm64: ...}")
# or in block style (a "kubelet:" or "sha256:" line, then one line per
# architecture); both are rewritten.
section="" version="" pending=""
while IFS= read -r line; do
  case "$line" in
    kubernetes:*) section=kubernetes ;;
    containerd:*) section=containerd ;;
    [a-zA-Z]*) section="" ;;
  esac
  if [[ "$line" =~ ^\ +version:\ *([0-9.]+) ]]; then
    version=${BASH_REMATCH[1]}
  fi
  indent=${line%%[! ]*}
  what=""
  if [[ "$section" == kubernetes && "$line" =~ ^\ +(kubelet|kubectl):\ *(\{)? ]]; then
    what=${BASH_REMATCH[1]} flow=${BASH_REMATCH[2]}
  elif [[ "$section" == containerd && "$line" =~ ^\ +sha256:\ *(\{)? ]]; then
    what=containerd flow=${BASH_REMATCH[1]}
  fi
  if [[ -n "$what" ]]; then
    echo "update-versions: $what $version" >&2
    pending=""
    key=${line#"$indent"}
    key=${key%%:*}
    if [[ -n "$flow" ]]; then
      line="$indent$(sums_line "$key" "$(url_for "$what" "$version")")"
    else
      pending=$what
    fi
  elif [[ -n "$pending" && "$line" =~ ^\ +(amd64|arm64): ]]; then
    url=$(url_for "$pending" "$version")
    line="$indent${BASH_REMATCH[1]}: $(fetch_sum "${url//@ARCH@/${BASH_REMATCH[1]}}")"
  else
    pending=""
  fi
  printf '%s\n' "$line" >> "$tmp"
done < "$file"
cp "$tmp" "$file"
echo "update-versions: $file rewritten; checking it" >&2
(cd "$root" && go test ./templates -run 'TestBuiltinVersionMap|TestGolden' -count=1 > /dev/null) ||
  echo "update-versions: the golden files change with the sums: go test ./templates -update, then review" >&2
