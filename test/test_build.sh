#!/usr/bin/env bash
# test_build.sh: the build records whether its objects were compiled for MPI (Makefile,
# MPI_STAMP), so a tree built before MPI was installed (`make run`, then `make test` on a fresh
# machine) is rebuilt once it is, instead of linking single-rank objects into the MPI trainer.
# One object in a scratch build folder: compiled without MPI, it is up to date for a make without
# MPI, out of date for one that finds mpicc, and out of date again when mpicc is gone.
set -u
cd "$(dirname "$0")/.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
check() {  # check NAME WANT_RC MAKE_ARGS...: `make -q` exits 0 when up to date, 1 when not
  local name=$1 want=$2
  shift 2
  make -q --no-print-directory "$@" > /dev/null 2>&1
  local rc=$?
  if [ $rc = "$want" ]; then
    echo "ok   $name"
    pass=$((pass + 1))
  else
    echo "FAIL $name (make -q exit $rc, want $want)"
    fail=$((fail + 1))
  fi
}
B=$TMP/build
OBJ=$B/cpu/data/tokenizer.o
MPICC_FOUND=$(command -v mpicc)
if make -s --no-print-directory BUILD="$B" MPICC= "$OBJ" > "$TMP/make.out" 2>&1; then
  echo "ok   one object compiled without MPI"
  pass=$((pass + 1))
  check "without MPI again: up to date" 0 BUILD="$B" MPICC= "$OBJ"
  if [ -n "$MPICC_FOUND" ]; then
    check "once make finds mpicc: out of date" 1 BUILD="$B" MPICC="$MPICC_FOUND" "$OBJ"
    check "and when mpicc is gone again: out of date" 1 BUILD="$B" MPICC= "$OBJ"
  else
    echo "note: no mpicc here; the MPI half of this check needs OpenMPI (make test installs it)"
  fi
else
  echo "FAIL compiling one object without MPI: $(tail -3 "$TMP/make.out")"
  fail=$((fail + 1))
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
