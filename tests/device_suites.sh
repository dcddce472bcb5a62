#!/bin/sh
# Prints the test suites (as TESTS names: tests/test_x) whose sources touch the device
# backend, the CUDA build or the device CLI: the suites that the CUDA emulation build runs
# differently from the plain build. Every other suite runs the same CPU code in both
# builds, so CI runs it in the plain build only. Conservative by construction: a source
# that so much as names the device counts, and a suite counts if any of its sources does.
#   sh tests/device_suites.sh            (from the repository root)
set -eu
cd "$(dirname "$0")/.."
# (the harness's .c files are in every suite: if one of them touched the device, all would)
if grep -qE 'HAVE_CUDA|cuda|device' tests/harness/*.c; then
  awk '/^TESTS \+=/ {print $3}' mk/*.am | sort -u; exit 0
fi
touched=$(grep -lE 'HAVE_CUDA|cuda|CUDA|device' tests/unit/*.c tests/cli/*.c | sed 's|.*/||')
# mk/*.am: "tests_test_x_SOURCES = a.c b.c \" continued on following lines
awk '
  /^tests_test_[a-z0-9_]+_SOURCES *=/ { name = $1; sub(/^tests_/, "", name); sub(/_SOURCES$/, "", name); cont = 1 }
  cont { for (i = 1; i <= NF; i++) if ($i ~ /\.c$/) { n = split($i, p, "/"); print name, p[n] }
         cont = ($NF == "\\") }
' mk/*.am |
while read -r suite src; do
  for t in $touched; do
    [ "$t" = "$src" ] && echo "tests/$suite"
  done
done | sort -u |
# the end-to-end device suites first, the longest (train) leading: make check starts
# suites in this order, and a long one started last would run alone at the end
awk '{ print ($0 ~ /test_device_/ ? 0 : 1), $0 }' | sort -k1,1n -k2,2r | cut -d' ' -f2
