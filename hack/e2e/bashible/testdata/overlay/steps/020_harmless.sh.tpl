{{ include "step-header" . }}
# A harmless step for simulated nodes: it records what it applied.
echo {{ .nodeGroup.name | squote }} > "$BASHIBLE_ROOT/applied-group"
echo "$BASHIBLE_CHECKSUM" >> "$BASHIBLE_ROOT/applied-checksums"
