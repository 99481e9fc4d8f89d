#!/usr/bin/env bash
# Prints, at the end of make test, how long each of its phases took, and each
# e2e suite and the slowest unit packages, slowest first, from the logs the
# test targets wrote. For the packages it reads go test's own
# "ok <package> <seconds>s" lines, so those figures are go test's.
set -Eeuo pipefail

logs=${1:?usage: test-durations.sh DIR (the directory test-unit and test-e2e log to)}

# durations LOG MIN: "<seconds> <package>" for each package of LOG that took
# at least MIN seconds, slowest first.
durations() {
	local log=$1 min=$2
	[[ -f $log ]] || return 0
	awk -v min="$min" '
		$1 == "ok" || $1 == "FAIL" {
			if ($3 ~ /^[0-9.]+s$/) { t = substr($3, 1, length($3) - 1); if (t + 0 >= min) printf "%8.1f s  %s%s\n", t, $2, ($1 == "FAIL" ? "  (FAIL)" : "") }
		}' "$log" | sort -rn
}

module=$(go list -m)
if [[ -s $logs/phases ]]; then
	echo "make test's phases (wall time, tools they build included):"
	awk '{ printf "%8d s  %s\n", $2, $1; total += $2 } END { printf "%8d s  in all\n", total }' "$logs/phases"
fi
echo "e2e suites, slowest first (go test runs them in that order, E2E_PARALLEL at a time):"
durations "$logs/e2e.log" 0 | sed "s|$module/||"
if [[ -f $logs/unit.log ]]; then
	awk '$1 == "ok" { if ($3 == "(cached)") cached++; else ran++ }
		END { printf "unit packages: %d run, %d not run again (go test reused their passing result: nothing they read has changed)\n", ran, cached }' "$logs/unit.log"
fi
echo "unit packages that took 5 s or more:"
durations "$logs/unit.log" 5 | sed "s|$module/||"
