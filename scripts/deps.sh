#!/usr/bin/env bash
# Installs what tttrace's build, demo and tests need and a fresh machine may
# lack (it has Go, gcc and the base system). Only missing tools are
# installed; nothing happens when all are present. Needs root for apt-get.
#   scripts/deps.sh build   compilers for the replica (g++, clang++)
#   scripts/deps.sh bpf     clang + llvm-strip for make generate
#   scripts/deps.sh bench   GNU time, taskset
#   scripts/deps.sh test    what the end-to-end tests drive: tmux (the live view), Prometheus and
#                           promtool (--listen), Debian python3 with pytest (leaks by test),
#                           protoc (the Perfetto file checked against the official schema),
#                           setpriv (tttrace under the systemd unit's and the Helm chart's capabilities),
#                           node and npm with the MCP Inspector's CLI in build/npm (tttrace mcp)
set -euo pipefail
want=()
need() { command -v "$1" >/dev/null 2>&1 || want+=("$2"); }
for what in "${@:-build}"; do
	case "$what" in
	build) need g++ g++; need clang++ clang; need python3 python3; need make make; need strip binutils; need objcopy binutils; need zstd zstd ;;
	bpf) need clang clang; need llvm-strip llvm ;;
	test) need tmux tmux; need prometheus prometheus; need promtool prometheus; need pytest-3 python3-pytest; need protoc protobuf-compiler; need setpriv util-linux; need npx npm; need node nodejs ;;
	bench) need /usr/bin/time time; need taskset util-linux; need pytest-3 python3-pytest ;;
	*) echo "deps.sh: unknown set $what" >&2; exit 2 ;;
	esac
done
# chromium: tttrace's --html page opened in a real browser (cmd/tttrace/e2e_html_test.go).
for what in "${@:-build}"; do if [ "$what" = test ]; then need chromium chromium; fi; done
# The official MCP Inspector's CLI, which the tttrace mcp test drives, in
# the project's build/npm (nothing installed globally), pinned.
inspector() {
	local prefix
	prefix="$(cd "$(dirname "$0")/.." && pwd)/build/npm"
	[ -f "$prefix/node_modules/@modelcontextprotocol/inspector-cli/build/cli.js" ] && return 0
	echo "deps.sh: installing @modelcontextprotocol/inspector-cli into $prefix" >&2
	mkdir -p "$prefix"
	npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error @modelcontextprotocol/inspector-cli@1.0.3 >/dev/null
}
if [ ${#want[@]} -eq 0 ]; then
	[[ " ${*:-build} " == *" test "* ]] && inspector
	exit 0
fi
pkgs=$(printf '%s\n' "${want[@]}" | sort -u | tr '\n' ' ')
echo "deps.sh: installing $pkgs" >&2
if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: need root to install $pkgs" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
# Debian starts the Prometheus it installs as a service (on :9090) where
# systemd runs; the tests start their own instances.
if [[ " $pkgs " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
[[ " ${*:-build} " == *" test "* ]] && inspector
exit 0
