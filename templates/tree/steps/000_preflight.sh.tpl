{{ include "step-header" . }}

if [[ $EUID -ne 0 ]]; then
  echo "preflight: bashible steps must run as root" >&2
  exit 1
fi
missing=()
for cmd in curl jq sysctl systemctl; do
  command -v "$cmd" >/dev/null || missing+=("$cmd")
done
if (( ${#missing[@]} > 0 )); then
  echo "preflight: missing commands: ${missing[*]}" >&2
  exit 1
fi
