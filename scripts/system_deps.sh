#!/usr/bin/env bash
# System programs and libraries nerfstudio needs beyond pip: open3d (imported by `ns-export`) loads
# libusb; `ns-render` calls the ffmpeg binary (even for image output); the slow tests run node/npm.
set -euo pipefail
missing=()
ldconfig -p 2>/dev/null | grep -q libusb-1.0.so.0 || missing+=(libusb-1.0-0)
command -v ffmpeg >/dev/null || missing+=(ffmpeg)
# node and npm: the third-party splat tools the slow tests check the export with (tests/test_third_party.py)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if (( ${#missing[@]} )); then
  if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "jax-gs: nerfstudio needs ${missing[*]} (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
fi
