#!/usr/bin/env bash
# setup.sh: what `make test` needs on a fresh Debian machine, installed when it is missing: a C
# and C++ compiler (the CUDA simulator builds the kernels as C++), OpenMPI (the multi-rank
# build and tests) and PyTorch for /usr/bin/python3 (the reference checks). It installs with
# apt-get when it may (root, or sudo without a password); otherwise it prints the one command
# to run and fails.
set -u
need=()
command -v mpicc > /dev/null || need+=(openmpi-bin libopenmpi-dev)
command -v make > /dev/null || need+=(make)
command -v gcc > /dev/null || need+=(gcc)
command -v g++ > /dev/null || need+=(g++)
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2> /dev/null || need+=(python3-torch)
[ ${#need[@]} = 0 ] && exit 0
echo "make test: installing ${need[*]} (missing)"
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo > /dev/null && sudo -n true 2> /dev/null; then
  sudo=(sudo -n)
else
  echo "error: make test needs ${need[*]}; install them with:"
  echo "  sudo apt-get install ${need[*]}"
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get update -qq || ! "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" > /dev/null; then
  echo "error: apt-get could not install ${need[*]}; install them, then run make test again"
  exit 1
fi
