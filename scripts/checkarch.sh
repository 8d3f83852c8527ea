#!/usr/bin/env bash
# docs/architecture.md's package table against `go list ./...` (make vet):
# every row names a directory of the tree, every package is a row of its
# own, and the helpers (test doubles *test, internal/, the main package,
# scripts/) are at least named in the text.
set -euo pipefail
cd "$(dirname "$0")/.."
doc=docs/architecture.md
mod=$(go list -m)
rows=$(grep -o '^| `[^`]*`' "$doc" | sed 's/^| `//; s/`$//; s|/$||')
fail=0
for r in $rows; do
	if [ ! -d "$r" ]; then
		echo "$doc: a row for $r/, which is no directory"
		fail=1
	fi
done
for p in $(go list ./... | sed "s|^$mod/||"); do
	grep -qxF "$p" <<<"$rows" && continue
	case "$p" in
	*test | internal/* | */internal/* | cmd/tttrace | scripts/*)
		grep -qF "\`$p\`" "$doc" && continue
		echo "$doc: package $p is not named"
		;;
	*) echo "$doc: package $p has no row" ;;
	esac
	fail=1
done
exit $fail
