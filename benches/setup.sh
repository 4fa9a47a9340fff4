#!/usr/bin/env bash
# Installs what `cargo bench --bench gather` needs beyond cargo: fio, the ceiling it measures
# every method against. Without fio the bench prints "fio: not installed" and goes on.
set -euo pipefail
if command -v fio >/dev/null 2>&1; then
  echo "fio already installed: $(fio --version)"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y fio || { $sudo apt-get update && $sudo apt-get install -y fio; }
echo "installed: $(fio --version)"
