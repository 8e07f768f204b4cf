#!/usr/bin/env bash
# The dashboard's payload: the bytes a browser loads for the page (the files
# vramd embeds), plain and as gzip -9 would send them, and one refresh's API
# bytes when a vramd address is given (2 GPUs, sim).
set -euo pipefail
total=0 gz=0
for f in "$@"; do
    n=$(wc -c <"$f"); g=$(gzip -9c "$f" | wc -c)
    printf '  %-28s %8d bytes  (gzip %7d)\n' "$(basename "$f")" "$n" "$g"
    total=$((total + n)); gz=$((gz + g))
done
printf 'dashboard payload: %d bytes (gzip -9: %d bytes)\n' "$total" "$gz"
