#!/usr/bin/env bash
# test_includes.sh: dependencies point down. infra/ is beneath everything; kernels/ (the backend
# seam and the backends) stands on infra/ alone; fsdp/ (the algorithm) stands on kernels/ and
# infra/; layers/ and train/ use fsdp/. So a file under infra/ or kernels/ includes nothing from
# fsdp/, layers/ or train/, and a file under fsdp/ nothing from layers/ or train/. The checker
# is first run on a planted include, which it must report.
set -u
cd "$(dirname "$0")/.."
source test/cases.sh

# FOLDER:FORBIDDEN... : what the files under FOLDER may not include.
RULES=("infra:fsdp layers train kernels data weights predict"
       "kernels:fsdp layers train data weights predict"
       "fsdp:layers train data weights predict")

# violations ROOT FOLDER FORBIDDEN...: "file: #include line" for every include under ROOT/FOLDER
# of a header from a forbidden folder (quoted includes, as the project writes them).
violations() {
  local root=$1 folder=$2
  shift 2
  local alt
  alt=$(IFS='|'; echo "$*")
  [ -d "$root/$folder" ] || return 0
  grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
    "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"($alt)/" "$root/$folder" | sed "s#^$root/##"
}

check_tree() {  # check_tree ROOT: the violations of every rule
  local rule
  for rule in "${RULES[@]}"; do
    # shellcheck disable=SC2086
    violations "$1" "${rule%%:*}" ${rule#*:}
  done
}

if want planted; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/kernels/cpu" "$tmp/fsdp" "$tmp/infra"
  printf '#include "kernels/kernels.h"\n#include "fsdp/fsdp.h"\n' > "$tmp/kernels/cpu/bad.c"
  printf '#include "kernels/device.h"\n  #  include "train/train.h"\n' > "$tmp/fsdp/bad.h"
  printf '#include "infra/files.h"\n#include "layers/model.h"\n' > "$tmp/infra/bad.c"
  printf '#include "fsdp/fsdp.h"\n' > "$tmp/fsdp/good.c"
  found=$(check_tree "$tmp")
  if [ "$(grep -c . <<< "$found")" = 3 ] && grep -q '^kernels/cpu/bad.c:2:' <<< "$found" &&
     grep -q '^fsdp/bad.h:2:' <<< "$found" && grep -q '^infra/bad.c:2:' <<< "$found"; then
    ok "planted: the checker reports a kernels/ file including fsdp/, an fsdp/ header including train/, an infra/ file including layers/"
  else
    bad "planted" "the checker reported: $(tr '\n' ';' <<< "$found")"
  fi
  rm -rf "$tmp"
fi

for rule in "${RULES[@]}"; do
  folder=${rule%%:*}
  want "$folder" || continue
  # shellcheck disable=SC2086
  found=$(violations . "$folder" ${rule#*:} | sed 's#^\./##')
  if [ -z "$found" ] && [ -d "$folder" ]; then
    ok "$folder/ includes nothing from ${rule#*:} ($(find "$folder" -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | wc -l) files)"
  else
    bad "$folder/ includes from above it" "$(head -5 <<< "$found" | tr '\n' ';')"
  fi
done
cases_summary
[ $fail = 0 ]
