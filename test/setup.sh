#!/usr/bin/env bash
# setup.sh: what `make test` needs on a fresh Debian machine, installed when it is missing: a C
# and C++ compiler (the CUDA simulator builds the kernels as C++), OpenMPI (the multi-rank
# build and tests), PyTorch for /usr/bin/python3 (the reference checks) and, beside nvcc,
# cuobjdump (the kernel report's machine code). It installs with
# apt-get when it may (root, or sudo without a password); otherwise it prints the one command
# to run and fails.
set -u
# The kernel report reads the kernels' machine code with cuobjdump (which runs nvdisasm); a CUDA
# toolkit that has nvcc but not cuobjdump gets both from their wheels (nvidia-cuda-cuobjdump,
# nvidia-cuda-nvdisasm), into build/tools/python.
if { command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
    [ -z "$(python3 -c 'import sys; sys.path.insert(0, "scripts"); import kernel_report; print(kernel_report.find_cuobjdump() or "")' 2> /dev/null)" ]; then
  echo "make test: installing cuobjdump and nvdisasm (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into build/tools/python"
  python3 -m pip install -q --disable-pip-version-check --upgrade --target build/tools/python nvidia-cuda-cuobjdump \
      nvidia-cuda-nvdisasm > /dev/null 2>&1 ||
    echo "note: pip could not install cuobjdump: the kernel report's machine-code checks will not run"
fi
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
