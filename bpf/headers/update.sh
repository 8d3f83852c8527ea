#!/usr/bin/env bash
# Vendors the libbpf BPF-side headers tttrace compiles against, from the
# Debian libbpf-dev package at a pinned version, so `make generate` does not
# depend on whatever libbpf a machine happens to have.
set -euo pipefail
LIBBPF_DEB_VERSION="1:1.1.2-0+deb12u1"
here=$(cd "$(dirname "$0")" && pwd)
have=$(dpkg-query -W -f='${Version}' libbpf-dev 2>/dev/null || true)
if [ "$have" != "$LIBBPF_DEB_VERSION" ]; then
	apt-get install -y --allow-downgrades "libbpf-dev=$LIBBPF_DEB_VERSION"
fi
mkdir -p "$here/bpf"
for h in bpf_helpers.h bpf_helper_defs.h bpf_tracing.h bpf_core_read.h; do
	cp "/usr/include/bpf/$h" "$here/bpf/$h"
done
echo "$LIBBPF_DEB_VERSION" > "$here/bpf/VERSION"
