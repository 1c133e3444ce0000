#!/usr/bin/env bash
# System libraries nerfstudio needs beyond pip: open3d (imported by `ns-export`) loads libusb.
set -euo pipefail
if ! ldconfig -p 2>/dev/null | grep -q libusb-1.0.so.0; then
  if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq && apt-get install -y -qq libusb-1.0-0 >/dev/null
  else
    echo "jax-gs: ns-export needs libusb-1.0 (Debian/Ubuntu: sudo apt-get install libusb-1.0-0)" >&2
    exit 1
  fi
fi
