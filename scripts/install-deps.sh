#!/bin/bash
# Installs what gpumf needs to build and test on Debian 12 (run as root).
set -e
pkgs="postgresql-15 postgresql-server-dev-15 postgresql-15-cron libopenblas-dev make gcc python3"
missing=$(for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $missing >/dev/null
fi
