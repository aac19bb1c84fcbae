#!/usr/bin/env bash
# Installs the Debian packages the build needs, only when one is missing
# (idempotent; a no-op on a machine that has them).
set -euo pipefail
packages=(cmake ninja-build g++ gcc make libdnnl-dev)
packages+=(clang-format)  # make lint: the C/C++ layout (.clang-format)
packages+=(tmux)  # tests/test_observe_cli.py drives neuron-top in a terminal
packages+=(libasan8 libubsan1 libtsan2)  # make test: the C tests under ASan+UBSan and ThreadSanitizer
packages+=(linux-perf)  # make bench: bench/step_bound.py splits a training step by perf samples
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
